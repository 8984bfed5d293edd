package webhookstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
	statepkg "github.com/effectively-once/webhooks/pkg/state"
)

// CombinedValue: a value a team combines from several projections of one
// subject (Pipeline.Combined) holds what the test declares, whatever the
// order of the events, the copies and the crashes: after the last event
// it holds Want's fields, and after every event Always accepts it; the
// combine function does not panic and gives one value for one input.
const CombinedValue Rule = "combined value of a subject's projections"

// Combined is a value a team's read code computes from the current states
// of several projections of one subject (a subscription's own projection
// and the one its invoices feed, combined into its access), as
// state.Reader.Components reads them; docs/combining.md has the pattern.
// The kit reads the components the same way after every event of every
// run and checks what Combine makes of them.
type Combined struct {
	// Name names the value in failures, e.g. "access".
	Name string
	// Source is the source whose scope holds the components; it may be
	// left out when Sources configures one source.
	Source string
	// Projections are the components' projection names, as their
	// projections name them, e.g. "stripe_subscription" and
	// "subscription_payment". Each must be written by one of the events.
	Projections []string
	// Combine is the team's pure function of the components' current
	// states by projection name (a component with no state of the subject
	// yet is absent; numbers are json.Number): the same function its read
	// code calls with Components.States(). Required.
	Combine func(states map[string]map[string]any) map[string]any
	// Want is, per subject id, what the combined value must hold once
	// every event is processed: each field it names must equal the
	// combined value's, compared as JSON.
	Want map[string]map[string]any
	// Always, when set, is checked after every event of every run, on
	// every subject of the components that has a state: a rule that must
	// hold at every moment a reader may look ("a paid invoice never
	// restores an ended subscription"). An error breaks CombinedValue,
	// with the error's text.
	Always func(states map[string]map[string]any, combined map[string]any) error
}

// combination is a Combined as a run checks it.
type combination struct {
	Combined
	scope    string
	subjects []string // the subject ids the events write in the components
}

// combinations checks Pipeline.Combined against the events' facts.
func (k *kit) combinations() ([]combination, error) {
	var out []combination
	names := map[string]bool{}
	for i, c := range k.p.Combined {
		what := fmt.Sprintf("Combined[%d] %q", i, c.Name)
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("the combined value Combined[%d] has no Name", i)
		case names[c.Name]:
			return nil, fmt.Errorf("%s: two combined values have this name", what)
		case c.Combine == nil:
			return nil, fmt.Errorf("%s has no Combine function", what)
		case len(c.Projections) == 0 || len(c.Projections) > statepkg.MaxComponents:
			return nil, fmt.Errorf("%s: between 1 and %d projections", what, statepkg.MaxComponents)
		}
		names[c.Name] = true
		src, err := k.sourceOf(Event{Source: c.Source})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		cb := combination{Combined: c, scope: src.Scope()}
		subjects := map[string]bool{}
		for _, p := range c.Projections {
			name := projection.ScopedName(cb.scope, p)
			written := false
			for _, f := range k.facts {
				if f.write.Name == name {
					written = true
					subjects[f.write.Subject] = true
				}
			}
			if !written && !k.unusable {
				return nil, fmt.Errorf("%s: no event writes projection %q in scope %q", what, p, cb.scope)
			}
		}
		for s := range c.Want {
			if !subjects[s] {
				return nil, fmt.Errorf("%s: Want names subject %q, which no event of its projections writes", what, s)
			}
		}
		for s := range subjects {
			cb.subjects = append(cb.subjects, s)
		}
		sort.Strings(cb.subjects)
		out = append(out, cb)
	}
	return out, nil
}

// checkCombined reads every combination's components of every subject as
// a team's service reads them and checks the combined value: after the
// step that processed event (final: the run's last, where Want applies).
func (r *runner) checkCombined(event string, final bool) {
	reader := statepkg.New(r.h.DB, r.h.Table)
	for _, c := range r.k.combined {
		for _, id := range c.subjects {
			if r.combinedFailed(c.Name, id) {
				continue // its first failure in the run says it; the later ones would repeat it
			}
			comp, err := reader.Components(r.ctx, c.scope, id, c.Projections...)
			switch {
			case errors.Is(err, statepkg.ErrNotFound):
				if want, ok := c.Want[id]; ok && final {
					r.problem(CombinedValue, "%s of %s: none of its projections %v has the subject once every event is processed, want %s",
						c.Name, id, c.Projections, render(want))
				}
				continue
			case err != nil:
				r.problem(CombinedValue, "%s of %s: reading its projections after event %s: %v", c.Name, id, event, err)
				continue
			}
			states := comp.States()
			got, err := combine(c.Combine, states)
			if err != nil {
				r.problem(CombinedValue, "%s of %s after event %s, over %s: %v", c.Name, id, event, renderStates(states), err)
				continue
			}
			if c.Always != nil {
				if err := c.Always(states, got); err != nil {
					r.problem(CombinedValue, "%s of %s is %s after event %s, over %s: %v",
						c.Name, id, render(got), event, renderStates(states), err)
				}
			}
			if want, ok := c.Want[id]; ok && final {
				if stateMismatch(want, got) != "" {
					r.problem(CombinedValue, "%s of %s ends as %s, want %s, combined over %s", c.Name, id, render(got), render(want), renderStates(states))
				}
			}
		}
	}
}

// combinedFailed reports whether the run already broke CombinedValue for
// the value name of subject id.
func (r *runner) combinedFailed(name, id string) bool {
	prefix := name + " of " + id + " "
	for _, p := range r.obs.problems {
		if p.Rule == CombinedValue && strings.HasPrefix(p.Detail, prefix) {
			return true
		}
	}
	return false
}

// combine calls the team's function twice on one input (each call on its
// own copy): a panic, or two values for one input, is its error.
func combine(f func(map[string]map[string]any) map[string]any, states map[string]map[string]any) (out map[string]any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("its combine function panicked: %v", p)
		}
	}()
	first := f(copyStates(states))
	again := f(copyStates(states))
	if !sameJSON(first, again) {
		return nil, fmt.Errorf("its combine function gave %s, then %s for the same states: it must be a pure function of them (no clock, no randomness, no I/O)",
			render(first), render(again))
	}
	return first, nil
}

// copyStates is a deep copy through JSON, numbers kept as json.Number, so
// a combine function that changes its argument changes nothing else.
func copyStates(states map[string]map[string]any) map[string]map[string]any {
	b, err := json.Marshal(states)
	if err != nil {
		return states
	}
	var out map[string]map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return states
	}
	return out
}

// renderStates is the components' states as a message shows them.
func renderStates(states map[string]map[string]any) string {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " " + render(states[n])
	}
	if len(parts) == 0 {
		return "no state"
	}
	return strings.Join(parts, ", ")
}
