package config

import (
	"cmp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// A configuration that passes every per-field check can still be too expensive as a whole:
// 256 rules with a million keys each, or thousands of long regular expressions. Envoy runs
// one Wasm VM per worker thread, V8 caps each at 1 GiB of linear memory and traps beyond it,
// and every VM parses and compiles the configuration itself. The bounds below keep what any
// accepted configuration can cost, in memory and in configure time, well inside that.
const (
	// maxRegexProgram bounds one regular expression's compiled program, in RE2 instructions
	// of the anchored form the filter runs. Compile time and memory grow with the program,
	// and a counted repetition copies its operand: `[a-z]{1000}` is 1,004 instructions from
	// 11 bytes. Useful header and path expressions are tens of instructions.
	maxRegexProgram = 1000
	// MaxRegexProgramTotal bounds all of a configuration's expressions together (up to 256
	// rules x 33), so that their number cannot multiply into seconds of configure time.
	MaxRegexProgramTotal = 20_000

	// maxVMTableBytes bounds the worst-case memory the rules' key tables can hold in each
	// worker VM (see TableCost). With Go's garbage collector targeting twice the live heap,
	// 128 MiB of tables keeps a VM far below V8's 1 GiB cap, next to the module's own few MiB.
	maxVMTableBytes = 128 << 20
	// maxSharedDataBytes bounds the worst-case size of the rules' slots in Envoy's shared
	// data (see TableCost). Shared data is process memory outside the VMs, never expires and
	// cannot be deleted by the filter, so every slot a config allows may stay forever.
	maxSharedDataBytes = 512 << 20
)

// TableCost is the worst case of what one rule's local key table can hold: Slots shared-data
// entries (max_keys slots, or one for a rule without key parts, plus the overflow slots and
// the table's bookkeeping entries), VMBytes in every worker VM and SharedBytes in Envoy's
// shared data. Every rule has a table, global rules too (redis.failure_mode "local" decides on
// it). The figures are sharedstate's own, so they follow the table's layout.
type TableCost struct {
	Slots       int64
	VMBytes     int64
	SharedBytes int64
}

// tableBookkeeping is the number of shared-data entries a table keeps besides its slots: the
// created-slot counter and the record of its max_keys values, counted with a margin of one.
const tableBookkeeping = 3

// TableCost returns the worst-case cost of r's table under c's domain.
func (c *Config) TableCost(r *Rule) TableCost {
	slots := int64(r.MaxKeys)
	if len(r.Key) == 0 {
		slots = 1 // the filter gives a rule without key parts a single slot
	}
	state := 0
	if r.Limiter != nil {
		state = r.Limiter.StateSize()
	}
	// The table's prefix is "<domain>|<rule>|" (see the filter's plugin).
	prefix := len(c.Domain) + len(r.Name) + 2
	entries := slots + sharedstate.OverflowSlots + tableBookkeeping
	tc := TableCost{Slots: entries, VMBytes: sharedstate.TableVMBytes}
	if len(r.Overrides) > 0 {
		tc, state = overrideCosts(tc, r, state)
	}
	tc.SharedBytes = entries * int64(sharedstate.SharedBytesPerKey(prefix, state))
	return tc
}

// budget checks the rules' tables against maxVMTableBytes and maxSharedDataBytes together:
// each rule may be reasonable alone while their sum is not.
func (p *parser) budget(path string, c *Config) {
	var vm, shared int64
	for _, r := range c.Rules {
		tc := c.TableCost(r)
		vm += tc.VMBytes
		shared += tc.SharedBytes
	}
	if vm > maxVMTableBytes || shared > maxSharedDataBytes {
		p.overBudget(path, c, vm, shared)
	}
}

// overBudget reports the budgets that the rules' tables exceed, vm bytes in every worker VM
// and shared bytes in Envoy's shared data, each with its largest tables (out of line).
func (p *parser) overBudget(path string, c *Config, vm, shared int64) {
	report := func(total, budget int64, where string, of func(TableCost) int64) {
		sorted := append([]*Rule(nil), c.Rules...)
		slices.SortStableFunc(sorted, func(a, b *Rule) int { return cmp.Compare(of(c.TableCost(b)), of(c.TableCost(a))) })
		var top []string
		for _, r := range sorted[:min(3, len(sorted))] {
			tc := c.TableCost(r)
			top = append(top, joinIndex(path, r.Index)+" "+strconv.FormatInt(tc.Slots, 10)+" keys x "+
				strconv.FormatInt(of(tc)/tc.Slots, 10)+" B = "+formatBytes(of(tc)))
		}
		p.add(path, "the rules' key tables could hold "+formatBytes(total)+" "+where+", above the budget of "+formatBytes(budget)+
			"; largest: "+strings.Join(top, ", ")+" (lower max_keys, or use fewer keyed rules)")
	}
	if vm > maxVMTableBytes {
		report(vm, maxVMTableBytes, "in every worker VM", func(tc TableCost) int64 { return tc.VMBytes })
	}
	if shared > maxSharedDataBytes {
		report(shared, maxSharedDataBytes, "in Envoy's shared data", func(tc TableCost) int64 { return tc.SharedBytes })
	}
}

// overrideCosts adds to tc what the rule's overrides cost, and returns the largest state the
// rule's slots may hold, state being the rule's own (out of line). A limited override decides
// the rule's keys in the rule's slots through a table object of its own in each VM; its
// states may be larger than the rule's (a sliding log's grows with its limit).
func overrideCosts(tc TableCost, r *Rule, state int) (TableCost, int) {
	for i := range r.Overrides {
		o := &r.Overrides[i]
		if o.Unlimited || o.Limiter == nil {
			continue
		}
		tc.VMBytes += sharedstate.TableVMBytes
		state = max(state, o.Limiter.StateSize())
	}
	return tc, state
}

// formatBytes renders a size in binary units with one decimal.
func formatBytes(n int64) string {
	for i, unit := range []string{" GiB", " MiB", " KiB"} {
		if d := int64(1) << (30 - 10*i); n >= d {
			return strconv.FormatFloat(float64(n)/float64(d), 'f', 1, 64) + unit
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// regexProgram returns the number of instructions of src's compiled RE2 program.
func regexProgram(src string) (int, error) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// checkRegexProgram enforces maxRegexProgram on one anchored expression and
// MaxRegexProgramTotal on the configuration so far, before the expression is compiled for
// matching (which costs time and memory in proportion to the program).
func (p *parser) checkRegexProgram(path, anchored string) bool {
	if p.regexInsts > MaxRegexProgramTotal {
		return false // refused already: later expressions are neither counted nor compiled
	}
	n, err := regexProgram(anchored)
	if err != nil {
		p.add(path, err.Error())
		return false
	}
	// A refused expression counts towards the total too: counting its program cost as much
	// as compiling it.
	over := p.regexInsts > MaxRegexProgramTotal
	p.regexInsts += n
	if n > maxRegexProgram {
		p.add(path, "compiles to "+strconv.Itoa(n)+" RE2 instructions; the maximum is "+strconv.Itoa(maxRegexProgram)+
			" (a counted repetition such as {100} repeats its operand's program that many times)")
		return false
	}
	if over {
		return false // reported once, where the total was crossed
	}
	if p.regexInsts > MaxRegexProgramTotal {
		p.add(path, "the config's regular expressions compile to "+strconv.Itoa(p.regexInsts)+
			" RE2 instructions so far; the maximum for all of them together is "+strconv.Itoa(MaxRegexProgramTotal))
		return false
	}
	return true
}
