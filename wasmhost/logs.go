package wasmhost

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Log sources of a LogEntry.
const (
	SourceProxyLog = "proxy_log" // the guest called proxy_log
	SourceStdout   = "stdout"    // the guest wrote to fd 1 (Envoy logs it at info)
	SourceStderr   = "stderr"    // the guest wrote to fd 2 (Envoy logs it at error)
	SourceHost     = "host"      // the host reports something about the guest (trap, proc_exit, restricted call)
)

// LogEntry is one log line produced by or about a VM.
type LogEntry struct {
	Time      time.Time // when the host recorded the entry
	Level     LogLevel  // the guest's level for proxy_log; info or error for stdout and stderr
	VM        int       // worker index; -1 is the canary VM
	ContextID uint32    // context the guest was running in (0: none / VM context)
	Source    string    // one of the Source* constants
	Message   string    // one line for stdout and stderr; as the guest passed it for proxy_log
}

// String formats the entry like a compact Envoy log line.
func (e LogEntry) String() string {
	vm := fmt.Sprintf("vm %d", e.VM)
	if e.VM < 0 {
		vm = "canary"
	}
	return fmt.Sprintf("[%s][%s][%s ctx %d] %s", e.Level, e.Source, vm, e.ContextID, e.Message)
}

// logSink keeps the most recent entries of a Host and optionally echoes them.
type logSink struct {
	mu      sync.Mutex
	entries []LogEntry
	max     int
	w       io.Writer
}

func (l *logSink) add(e LogEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) >= l.max {
		// Drop the oldest half at once so that appends stay amortised O(1).
		n := copy(l.entries, l.entries[len(l.entries)/2:])
		l.entries = l.entries[:n]
	}
	l.entries = append(l.entries, e)
	if l.w != nil {
		fmt.Fprintln(l.w, e.String())
	}
}

func (l *logSink) snapshot() []LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LogEntry(nil), l.entries...)
}

func (l *logSink) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = l.entries[:0]
}

// formatLogs renders entries for an error message.
func formatLogs(entries []LogEntry, minLevel LogLevel) string {
	var b strings.Builder
	for _, e := range entries {
		if e.Level >= minLevel {
			b.WriteString("\n\t")
			b.WriteString(e.String())
		}
	}
	return b.String()
}
