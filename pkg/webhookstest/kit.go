package webhookstest

import (
	"errors"
	"fmt"
	"sort"

	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// resentSuffix is appended to an event id for its re-sent copy.
const resentSuffix = "-resent"

// kit is one Check: the configuration, the facts and what the events
// projected alone already showed.
type kit struct {
	p     Pipeline
	cfg   config
	facts []*fact
	alone []Failure // broken rules found by projecting each event alone
	// warnings are what the events projected alone show that is probably
	// not what the team means, without breaking a rule.
	warnings []Warning
	// reused: an operation id is reused (reported in alone): a run that
	// disagrees with the model adds one failure, not a cascade.
	reused bool
	// unusable: a fact the model cannot use (no result, another
	// subject): no run is played.
	unusable bool
	// combined are Pipeline.Combined, checked against the facts.
	combined []combination
}

func newKit(p Pipeline, events []Event) (*kit, error) {
	if p.Rules.Registry == nil {
		return nil, errors.New("the rules have no registry (Pipeline.Rules.Registry is required)")
	}
	if len(events) == 0 {
		return nil, errors.New("no events: give the events of your subjects")
	}
	cfg, err := parseConfig(p)
	if err != nil {
		return nil, err
	}
	k := &kit{p: p, cfg: cfg}
	for i, ev := range events {
		f, err := k.fact(ev)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		k.facts = append(k.facts, f)
	}
	k.checkAlone()
	if k.combined, err = k.combinations(); err != nil {
		return nil, err
	}
	return k, nil
}

// fact signs and identifies one declared event (and its re-sent copy).
func (k *kit) fact(ev Event) (*fact, error) {
	src, err := k.sourceOf(ev)
	if err != nil {
		return nil, err
	}
	secret, ok := k.cfg.secretOf[src.Name]
	if !ok {
		_, err := secretFor(src.Kind)
		return nil, fmt.Errorf("source %s: %w", src.Name, err)
	}
	if len(ev.Body) == 0 {
		return nil, errors.New("its body is empty")
	}
	f := &fact{ev: ev, secret: secret, version: ev.Version, d: delivery{src: src, id: ev.ID, body: ev.Body}}
	if src.Kind == "standard-webhooks" && f.d.id == "" {
		f.d.id = bodyID(ev.Body)
	}
	id, err := f.d.identify(secret, receivedAt)
	if err != nil {
		return nil, err
	}
	f.id, f.typ, f.payload = id.EventID, id.Type, id.Payload
	if f.again, err = f.d.resent(resentSuffix); err != nil {
		return nil, err
	}
	again, err := f.again.identify(secret, againAt)
	if err != nil {
		return nil, fmt.Errorf("re-sent under another id: %w", err)
	}
	f.againID, f.againPayload = again.EventID, again.Payload
	return f, nil
}

// sourceOf is the source an event names, or the only one.
func (k *kit) sourceOf(ev Event) (source.Source, error) {
	names := k.cfg.sources.Names()
	if ev.Source == "" {
		if len(names) != 1 {
			return source.Source{}, fmt.Errorf("it names no source and the SOURCES document configures %v", names)
		}
		ev.Source = names[0]
	}
	src, ok := k.cfg.sources.Lookup(ev.Source)
	if !ok {
		return source.Source{}, fmt.Errorf("source %q is not in Sources (%v)", ev.Source, names)
	}
	return src, nil
}

func (k *kit) fail(r Rule, format string, a ...any) {
	k.alone = append(k.alone, Failure{Rule: r, Detail: fmt.Sprintf(format, a...)})
}

// checkAlone projects each event by itself, as first delivered and as
// re-sent under another id an hour later, and checks the result against
// what the test declares and against itself; then the declared versions
// against each other and the intents' kinds against the effects.
func (k *kit) checkAlone() {
	reg := k.p.Rules.Registry
	for _, f := range k.facts {
		res, err := project(reg, f, f.id, f.payload, receivedAt)
		if err == nil && res.Write == nil {
			err = errors.New("its result writes no state: the kit checks the events of your subjects")
		}
		if err != nil {
			k.fail(Processed, "event %s (%s): %s", f.id, f.typ, fate(err))
			k.unusable = true
			continue
		}
		f.write, f.intents = *res.Write, res.Intents
		f.key = subjectKey{name: f.write.Name, subject: f.write.Subject}
		if f.write.Subject != f.ev.Subject {
			k.fail(HighestVersion, "event %s (%s): its projection writes subject %q, the test declares %q", f.id, f.typ, f.write.Subject, f.ev.Subject)
			k.unusable = true
			continue
		}
		if f.write.Version != f.version {
			k.fail(HighestVersion, "event %s (%s) of subject %s: its projection gives version %d, the test declares version %d",
				f.id, f.typ, f.key, f.write.Version, f.version)
		}
		if d := stateMismatch(f.ev.State, f.write.State); d != "" {
			k.fail(HighestVersion, "event %s (%s) of subject %s: projected alone its state has %s", f.id, f.typ, f.key, d)
		}
		k.checkAgain(f)
		k.checkEffects(f)
	}
	if k.unusable {
		return
	}
	// Two states at one declared version: the pipeline keeps whichever
	// comes first and quarantines the other (version_conflict).
	seen := map[subjectKey]map[int64]*fact{}
	for _, f := range k.facts {
		if seen[f.key] == nil {
			seen[f.key] = map[int64]*fact{}
		}
		if g := seen[f.key][f.version]; g != nil && g.write.Fingerprint != f.write.Fingerprint {
			k.fail(HighestVersion, "events %s (%s) and %s (%s) of subject %s are both version %d with different states (%s and %s): the pipeline keeps whichever is processed first and quarantines the other; give each state its own version",
				g.id, g.typ, f.id, f.typ, f.key, f.version, render(g.write.State), render(f.write.State))
			k.unusable = true
		}
		seen[f.key][f.version] = f
	}
	if !k.unusable {
		k.checkOperationIDs()
	}
}

// checkOperationIDs compares the intents of every two events that share
// an operation id, as the ledger will when the later one commits: a
// reuse (another action under the id) is the rule's mistake, reported
// once per id with its fix; a once effect whose payload differs between
// the revisions that ask for it is a warning (the downstream keeps the
// first one performed, which may be the older).
func (k *kit) checkOperationIDs() {
	type asked struct {
		f  *fact
		in projection.Intent
	}
	byID := map[string][]asked{}
	var ids []string
	for _, f := range k.facts {
		for _, in := range f.intents {
			if byID[in.OperationID] == nil {
				ids = append(ids, in.OperationID)
			}
			byID[in.OperationID] = append(byID[in.OperationID], asked{f, in})
		}
	}
	for _, id := range ids {
		all := byID[id]
		sort.SliceStable(all, func(i, j int) bool { return all[i].f.version < all[j].f.version })
	pairs:
		for i, a := range all {
			for _, b := range all[i+1:] {
				if a.f.key == b.f.key && (a.f.version == b.f.version || k.sameStateThrough(a.f, b.f)) {
					continue // b never writes its intents after a: the version rule keeps a's state
				}
				gone := a.f.key == b.f.key && k.removedBetween(a.in, a.f, b.f)
				switch judge(a.in, a.f.version, gone, b.in, b.f.version) {
				case reused:
					k.reused = true
					k.fail(OneActionPerOperationID, "%s: the pipeline refuses the later event's commit and quarantines it (%s): nothing of %s is written and the downstream never gets what it asks for. Fix the rule: include the revision in the operation id, e.g. projection.OperationID(subject, kind, strconv.FormatInt(version, 10))",
						reuseText(a.f, a.in, b.f, b.in, gone), codeOperationIDReused, b.f.id)
					break pairs
				case deduplicated:
					if payloadHash(a.in.Payload) != payloadHash(b.in.Payload) {
						k.warnings = append(k.warnings, Warning{Rule: OncePayload, Detail: fmt.Sprintf(
							"%s of %s (operation %s, once) is asked for by %s (version %d) with %s and by %s (version %d) with %s: the pipeline performs the first one it processes and records the other as deduplicated, so the downstream may keep the older payload: did you mean latest? If the effect must happen once per subject, give it one payload",
							a.in.Kind, a.in.Subject, id, a.f.id, a.f.version, renderPayload(a.in.Payload), b.f.id, b.f.version, renderPayload(b.in.Payload))})
						break pairs
					}
				}
			}
		}
	}
}

// sameStateThrough reports whether b (newer) gives a's state and every
// event of the subject between them does too: processed after a, b only
// advances the version and writes no intents.
func (k *kit) sameStateThrough(a, b *fact) bool {
	if a.write.Fingerprint != b.write.Fingerprint {
		return false
	}
	for _, h := range k.facts {
		if h.key == a.key && h.version > a.version && h.version < b.version && h.write.Fingerprint != a.write.Fingerprint {
			return false
		}
	}
	return true
}

// removedBetween reports whether an event of the subject between a and b
// (by version) gives a state that breaks the while_current intent in's
// condition: processed in version order, it removes the reason of a's
// intent before b asks for it again.
func (k *kit) removedBetween(in projection.Intent, a, b *fact) bool {
	if policyOf(in) != projection.PolicyWhileCurrent {
		return false
	}
	for _, h := range k.facts {
		if h.key == a.key && h.version > a.version && h.version < b.version && !holds(in.Condition, h.write.State) {
			return true
		}
	}
	return false
}

// codeOperationIDReused is the processor's quarantine code for a commit
// refused because one of its intents reuses an operation id.
const codeOperationIDReused = "operation_id_reused"

// reuseText says how two events' intents share an operation id.
func reuseText(a *fact, ai projection.Intent, b *fact, bi projection.Intent, gone bool) string {
	var differ string
	switch {
	case ai.Kind != bi.Kind || policyOf(ai) != policyOf(bi):
		differ = fmt.Sprintf("%s (%s) and %s (%s), two actions", ai.Kind, policyOf(ai), bi.Kind, policyOf(bi))
	case payloadHash(ai.Payload) != payloadHash(bi.Payload):
		differ = fmt.Sprintf("two payloads, %s and %s", renderPayload(ai.Payload), renderPayload(bi.Payload))
	case conditionText(ai.Condition) != conditionText(bi.Condition):
		differ = fmt.Sprintf("two conditions, %s and %s", conditionText(ai.Condition), conditionText(bi.Condition))
	case gone:
		differ = "a reason that a revision between them removes (the first intent ends OBSOLETE or compensated, the second is a new action)"
	default:
		differ = "two revisions, each of which the downstream must end with"
	}
	return fmt.Sprintf("operation id %s reused: projection %s asks for %s of %s (%s) for subject %s at version %d (event %s) and at version %d (event %s), with %s",
		ai.OperationID, a.key.name, bi.Kind, bi.Subject, policyOf(bi), b.key.subject, a.version, a.id, b.version, b.id, differ)
}

// renderPayload is an intent's payload as a message shows it.
func renderPayload(p map[string]any) string {
	if p == nil {
		return "no payload"
	}
	return render(p)
}

// fate says what the pipeline does with an event whose projection fails
// with err.
func fate(err error) string {
	var pe *projection.PermanentError
	if errors.As(err, &pe) {
		return fmt.Sprintf("the processor quarantines it (%s): %v", pe.Code, pe.Err)
	}
	return fmt.Sprintf("its projection fails, and the processor retries it until it is dead: %v", err)
}

// checkAgain projects the fact's re-sent copy (another event id, received
// an hour later): the same fact must give the same result.
func (k *kit) checkAgain(f *fact) {
	res, err := project(k.p.Rules.Registry, f, f.againID, f.againPayload, againAt)
	switch {
	case err != nil:
		k.fail(HighestVersion, "event %s (%s) of subject %s: re-sent as %s an hour later, %s", f.id, f.typ, f.key, f.againID, fate(err))
		return
	case res.Write == nil:
		k.fail(HighestVersion, "event %s (%s) of subject %s: re-sent as %s an hour later, its result writes no state", f.id, f.typ, f.key, f.againID)
		return
	}
	w := res.Write
	switch {
	case w.Subject != f.write.Subject || w.Version != f.write.Version:
		k.fail(HighestVersion, "event %s (%s) of subject %s: projected as first delivered it is version %d, re-sent as %s an hour later it is %s version %d: a version must come from the event's content, not from its delivery (its id, when it arrived, a counter)",
			f.id, f.typ, f.key, f.write.Version, f.againID, w.Subject, w.Version)
	case w.Fingerprint != f.write.Fingerprint:
		k.fail(HighestVersion, "event %s (%s) of subject %s: re-sent as %s an hour later it projects another state (%s, first %s): a state must come from the event's content, not from its delivery",
			f.id, f.typ, f.key, f.againID, render(w.State), render(f.write.State))
	}
	if len(res.Intents) != len(f.intents) {
		k.fail(OneCallPerOperation, "event %s (%s) of subject %s: it asks for %d intents, re-sent as %s %d: one fact must ask for the same effects whenever it is delivered",
			f.id, f.typ, f.key, len(f.intents), f.againID, len(res.Intents))
		return
	}
	for i, in := range f.intents {
		if again := res.Intents[i]; again.OperationID != in.OperationID {
			k.fail(OneCallPerOperation, "intent %s of subject %s: event %s gives operation id %s, the same event re-sent as %s gives %s: the downstream performs it once per delivery. Derive the id from the fact (subject, transition, version), never from the event id, the delivery or the time",
				in.Kind, in.Subject, f.id, in.OperationID, f.againID, again.OperationID)
		}
	}
}

// checkEffects: every intent kind the fact asks for (compensations
// included) has an effect that serves the source's scope.
func (k *kit) checkEffects(f *fact) {
	scope := f.d.src.Scope()
	kinds := map[string]bool{}
	for _, in := range f.intents {
		kinds[in.Kind] = true
		if in.Compensation != "" {
			kinds[in.Compensation] = true
		}
	}
	names := make([]string, 0, len(kinds))
	for kind := range kinds {
		names = append(names, kind)
	}
	sort.Strings(names)
	for _, kind := range names {
		e, ok := k.cfg.effect(kind)
		switch {
		case !ok:
			k.fail(Processed, "event %s (%s) asks for %s, which no effect in Effects performs: the dispatcher quarantines it (no_effect)", f.id, f.typ, kind)
		case !serves(e, scope):
			k.fail(Processed, "event %s (%s) asks for %s, whose effect serves scopes %v, not %q (source %s): the dispatcher quarantines it (scope_not_allowed)", f.id, f.typ, kind, e.Scopes, scope, f.d.src.Name)
		}
	}
}

// policyOf is an intent's policy as the dispatcher reads it.
func policyOf(in projection.Intent) projection.Policy {
	if in.Policy == "" {
		return projection.PolicyOnce
	}
	return in.Policy
}

// failures plays the runs and returns what broke: the events projected
// alone first, then the first run that broke anything.
func (k *kit) failures() ([]Failure, error) {
	out := append([]Failure(nil), k.alone...)
	if k.unusable {
		return out, nil
	}
	orders := k.p.Orders
	if orders <= 0 {
		orders = defaultOrders
	}
	runs := plan(len(k.facts), orders, k.p.Seed)
	var counts map[string]map[string]int
	for _, s := range runs {
		obs, err := k.play(s)
		if err != nil {
			return nil, err
		}
		if s.run == 0 {
			counts = obs.counts
		}
		if fs := k.check(s, obs); len(fs) > 0 {
			return append(out, k.afterReuse(fs)...), nil
		}
	}
	for i, c := range crashPlan(counts, k.p.Crashes, k.p.Seed) {
		s := runs[0]
		s.run, s.crash = len(runs)+i, &c
		obs, err := k.play(s)
		if err != nil {
			return nil, err
		}
		if fs := k.check(s, obs); len(fs) > 0 {
			return append(out, k.afterReuse(fs)...), nil
		}
	}
	return out, nil
}

// afterReuse is what a run's failures add to a reused operation id
// already reported: when the pipeline did not refuse it as the model
// expects (the later event QUARANTINED operation_id_reused, nothing of it
// written), one failure saying so, not every mismatch that follows from
// it; else the run's failures, which the reuse does not explain.
func (k *kit) afterReuse(fs []Failure) []Failure {
	if !k.reused {
		return fs
	}
	for _, f := range fs {
		if f.Rule == OneActionPerOperationID {
			return []Failure{{Rule: OneActionPerOperationID, Detail: "the pipeline did not refuse the reused operation id as expected: " + f.Detail}}
		}
	}
	return fs
}
