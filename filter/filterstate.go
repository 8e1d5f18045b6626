package filter

import "github.com/ratelimit-wasm/ratelimit/abi"

// With filter_state on, the filter sets two properties of every request it decided: the
// deciding rule's name (ratelimit.rule) and the decision (ratelimit.decision). Envoy keeps a
// property a Wasm filter sets in the request's filter state under "wasm." and its name, so its
// access log reads them with %FILTER_STATE(wasm.ratelimit.rule:PLAIN)% and
// %FILTER_STATE(wasm.ratelimit.decision:PLAIN)%.

// Decisions the ratelimit.decision property states.
const (
	stateAllowed      = "allowed"
	stateDenied       = "denied"
	stateShadowDenied = "shadow_denied"
)

// setContinuedState sets the properties of a request every rule let through: "shadow_denied"
// and the first rule that would have denied it, else "allowed" and the most restrictive rule
// that decided it (as the legacy headers choose). A request no rule decided gets neither.
func (h *httpContext) setContinuedState() {
	var by *applied
	decision := stateAllowed
	for i := range h.d.applied {
		a := &h.d.applied[i]
		if !a.decided {
			continue
		}
		if !a.decision.Allowed {
			if decision == stateAllowed {
				by, decision = a, stateShadowDenied
			}
			continue
		}
		if decision == stateAllowed && (by == nil || tighter(&a.decision, &by.decision)) {
			by = a
		}
	}
	if by != nil {
		setFilterState(by.rs.rule.Name, decision)
	}
}

// setFilterState sets the request's ratelimit.rule and ratelimit.decision properties. A host
// that refuses them is logged at debug level: the decision stands.
func setFilterState(rule, decision string) {
	for _, p := range [...][2]string{{"ratelimit.rule", rule}, {"ratelimit.decision", decision}} {
		if err := abi.SetProperty(p[0], p[1]); err != nil {
			abi.LogDebug("ratelimit: setting property " + p[0] + ": " + err.Error())
		}
	}
}
