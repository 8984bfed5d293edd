package webhookstest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
)

// defaultOrders is Pipeline.Orders' default.
const defaultOrders = 24

// schedule is one run: the declared events in some order, each delivered
// twice in a row (a provider's retry, under the same id), one of them
// also re-sent under another event id (the same fact again), every
// delivery processed before the next one is sent, and the effects
// dispatched after each event or only after the last; maybe with one
// crash.
type schedule struct {
	run    int
	order  []int // indexes of the facts, in delivery order
	resend int   // the fact re-sent under another id
	at     int   // the copy is delivered before order[at]; len(order): after the last
	eager  bool  // dispatch after each event
	crash  *crashPoint
}

// crashPoint is one instance's crash right before or after its nth call
// of an operation (counted from the instance's start).
type crashPoint struct {
	who string // "intake", "processor" or "dispatcher"
	c   awstrace.Crash
}

func (c crashPoint) String() string {
	when := "right before"
	if c.c.When == awstrace.After {
		when = "right after"
	}
	return fmt.Sprintf("the %s crashed %s its %s %s and was replaced", c.who, when, ordinal(c.c.Nth), c.c.Op)
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return fmt.Sprintf("%dth", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}

// steps are the schedule's deliveries, each processed before the next.
func (s schedule) steps(facts []*fact) []step {
	var out []step
	for i, n := range s.order {
		if i == s.at {
			out = append(out, step{f: facts[s.resend], copy: true})
		}
		out = append(out, step{f: facts[n]})
	}
	if s.at >= len(s.order) {
		out = append(out, step{f: facts[s.resend], copy: true})
	}
	return out
}

// describe says what the run did, for a failure's message.
func (s schedule) describe(facts []*fact, seed uint64) string {
	var names []string
	for _, st := range s.steps(facts) {
		if st.copy {
			names = append(names, st.name()+" (the same fact as "+st.f.id+")")
			continue
		}
		names = append(names, st.name())
	}
	d := "order " + strings.Join(names, ", ") + ", each delivered twice and processed before the next"
	if s.eager {
		d += "; effects dispatched after each event"
	} else {
		d += "; effects dispatched after the last event only"
	}
	if s.crash != nil {
		d += "; " + s.crash.String()
	}
	return d + fmt.Sprintf(" (seed %d, run %d)", seed, s.run)
}

// plan chooses the runs without crashes: every permutation in both
// dispatch modes when that is at most orders runs, else orders runs of
// random permutations (the first always the declared order), alternating
// the modes. The events take turns at being re-sent; where the copy goes
// is chosen per run.
func plan(n, orders int, seed uint64) []schedule {
	var out []schedule
	if all := permutations(n, orders/2); all != nil {
		for _, p := range all {
			out = append(out, schedule{order: p, eager: true}, schedule{order: p})
		}
	} else {
		rng := rand.New(rand.NewPCG(seed, 0))
		for i := range orders {
			p := identity(n)
			if i > 0 {
				rng.Shuffle(n, func(a, b int) { p[a], p[b] = p[b], p[a] })
			}
			out = append(out, schedule{order: p, eager: i%2 == 0})
		}
	}
	// Each event in turn is the one re-sent, somewhere in the order.
	for i := range out {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		out[i].run = i
		out[i].resend = i % n
		out[i].at = rng.IntN(n + 1)
	}
	return out
}

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// permutations lists every order of n items, the identity first, or nil
// when there are more than max.
func permutations(n, max int) [][]int {
	total := 1
	for i := 2; i <= n; i++ {
		if total *= i; total > max {
			return nil
		}
	}
	var out [][]int
	var walk func(p []int, used []bool)
	walk = func(p []int, used []bool) {
		if len(p) == n {
			out = append(out, append([]int(nil), p...))
			return
		}
		for i := range n {
			if !used[i] {
				used[i] = true
				walk(append(p, i), used)
				used[i] = false
			}
		}
	}
	walk(nil, make([]bool, n))
	return out
}

// writeOps are the calls a crash hits: the writes, where a crash leaves
// work half done.
var writeOps = map[string]bool{
	"DynamoDB.UpdateItem": true, "DynamoDB.PutItem": true, "DynamoDB.TransactWriteItems": true, "DynamoDB.DeleteItem": true,
	"SQS.SendMessage": true, "SQS.SendMessageBatch": true, "SQS.ChangeMessageVisibility": true,
}

// crashPlan chooses crash points among the writes each instance made in
// a clean run (counts by instance): one per (instance, operation, side)
// in a seeded order, each at a seeded call, then more at random up to n;
// n 0 means one per (instance, operation, side).
func crashPlan(counts map[string]map[string]int, n int, seed uint64) []crashPoint {
	type group struct {
		who, op string
		when    awstrace.When
		calls   int
	}
	var groups []group
	for _, who := range []string{"intake", "processor", "dispatcher"} {
		ops := make([]string, 0, len(counts[who]))
		for op, c := range counts[who] {
			if writeOps[op] && c > 0 {
				ops = append(ops, op)
			}
		}
		sort.Strings(ops)
		for _, op := range ops {
			for _, when := range []awstrace.When{awstrace.Before, awstrace.After} {
				groups = append(groups, group{who, op, when, counts[who][op]})
			}
		}
	}
	if n == 0 {
		n = len(groups)
	}
	if len(groups) == 0 || n < 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 1<<32))
	rng.Shuffle(len(groups), func(a, b int) { groups[a], groups[b] = groups[b], groups[a] })
	seen := map[string]bool{}
	var out []crashPoint
	for i := 0; len(out) < n && i < 4*n; i++ {
		g := groups[i%len(groups)]
		c := crashPoint{who: g.who, c: awstrace.Crash{Op: g.op, Nth: rng.IntN(g.calls) + 1, When: g.when}}
		if id := c.String(); !seen[id] {
			seen[id] = true
			out = append(out, c)
		}
	}
	return out
}
