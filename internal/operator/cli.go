package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// Settings are the connection and identity settings every command takes,
// from flags or the environment.
type Settings struct {
	Local      bool
	Table      string
	Prefix     string
	HavePrefix bool
	Queues     Queues
	Actor      string
	JSON       bool
	// RetentionDays is how long a resolved intent is kept (RETENTION_DAYS,
	// default 30: the deployed functions' value).
	RetentionDays int
	// DueShards is how many due-index shards the listings read
	// (DUE_SHARDS_READ, else DUE_SHARDS, default 4: the deployed
	// functions' read width, or more).
	DueShards int
	// WarehouseBucket and WarehousePrefix name the warehouse sink's
	// records (WAREHOUSE_BUCKET, WAREHOUSE_PREFIX, as the functions read
	// them; --local: the make-dev stack's unless DEV_WAREHOUSE=off). No
	// bucket: the warehouse is not configured, and the commands about it
	// say so.
	WarehouseBucket, WarehousePrefix string
	// WarehouseProjections is WAREHOUSE_PROJECTIONS as the functions have
	// it: the commands leave projections that are not recorded alone.
	WarehouseProjections string
}

// Clients are what Connect builds.
type Clients struct {
	DynamoDB DynamoDB
	SQS      SQS
	// STS verifies who is calling before a write; nil with --local (the
	// `make dev` stack has no AWS identity).
	STS STS
	// S3 reads the warehouse sink's records; nil leaves the warehouse
	// unread.
	S3 S3
}

// DynamoDB is the ledger's client plus Scan.
type DynamoDB interface {
	ledger.DynamoDB
	ledger.Scanner
}

// Env is everything Run takes from its surroundings, so tests inject it.
type Env struct {
	Getenv   func(string) string
	Hostname func() (string, error)
	// LocalUser names the operating system's user, the identity an
	// operator write records with --local; default os/user.Current.
	LocalUser func() (string, error)
	Stdout    io.Writer
	Stderr    io.Writer
	Clock     ledger.Clock
	// Connect builds the clients; main passes operator.Connect.
	Connect func(ctx context.Context, s Settings, getenv func(string) string) (Clients, error)
	// NewLimiter paces bulk replays; default a Pacer on the wall clock.
	NewLimiter func(interval time.Duration) Limiter
}

const usageTop = `webhookctl: operate the effectively-once webhook platform.

Usage:
  webhookctl [connection flags] COMMAND [flags] [args]

Commands:
  events list        list events by --status/--source/--type/--older-than (--scan for PROCESSED)
  events show        SOURCE EVENT_ID: identities, status, attempts, result, payload summary, audit
  replay             SOURCE EVENT_ID --reason R, or --status DEAD|QUARANTINED --reason R (bulk)
  quarantine         SOURCE EVENT_ID --reason R: hold an event for an operator
  release            SOURCE EVENT_ID --reason R: a QUARANTINED event back to RECEIVED, enqueued
  intents list       open outbox intents by --status
  intents show       OPERATION_ID: one intent with its audit trail
  intents resolve    OPERATION_ID --outcome succeeded|failed --reason R
  stats              the dashboard: open work, oldest, DEAD, QUARANTINED, intents, DLQ depths,
                     and with a warehouse its drift (canonical revision != warehouse revision)
  dlq status         depth and oldest sampled age of each dead-letter queue
  projections show   PROJECTION SUBJECT: canonical version, warehouse version and record status
  warehouse backfill [--projection P] --reason R [--dry-run]: write each current version's
                     missing record intent (resumable with --cursor)

A write (replay, quarantine, release, intents resolve, warehouse backfill) records --actor beside the ARN of
the AWS credentials that sign it (sts:GetCallerIdentity, asked of the region's STS whatever
endpoint the configuration names), or the local user with --local. It writes nothing when
that cannot be verified.

Every command takes --help, --json and the connection flags:
`

// command is one subcommand.
type command struct {
	name     string // "events list"
	args     string // synopsis of the positional arguments
	nargs    int    // exact number of positional arguments, or -1 for 0 or 2 (replay)
	about    string
	register func(fs *flag.FlagSet) func(ctx context.Context, a *App, args []string) error
}

// Run runs one command line (args without the program name) and returns
// the exit status: 0 done, 1 failed, refused or incomplete, 2 bad usage or
// configuration.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Clock == nil {
		env.Clock = ledger.SystemClock{}
	}
	if env.Hostname == nil {
		env.Hostname = os.Hostname
	}
	if env.LocalUser == nil {
		env.LocalUser = currentUser
	}
	// Everything printed passes through a textWriter (text.go), so that
	// nothing a sender put in the ledger reaches the terminal raw.
	stdout, stderr := newTextWriter(env.Stdout), newTextWriter(env.Stderr)
	defer stdout.Flush()
	defer stderr.Flush()
	env.Stdout, env.Stderr = stdout, stderr
	s := settingsFromEnv(env.Getenv)
	top := flag.NewFlagSet("webhookctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	addConnectionFlags(top, &s)
	fail := func(err error) int {
		fmt.Fprintln(env.Stderr, "webhookctl: "+err.Error())
		if errors.Is(err, ErrUsage) || errors.Is(err, ErrConfig) {
			return 2
		}
		return 1
	}
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printTopUsage(env.Stdout, top)
			return 0
		}
		return fail(fmt.Errorf("%w: %v (webhookctl --help)", ErrUsage, err))
	}
	rest := top.Args()
	if len(rest) == 0 {
		printTopUsage(env.Stderr, top)
		return 2
	}
	if rest[0] == "help" {
		printTopUsage(env.Stdout, top)
		return 0
	}
	cmd, rest, err := findCommand(rest)
	if err != nil {
		return fail(err)
	}
	fs := flag.NewFlagSet("webhookctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addConnectionFlags(fs, &s)
	runCmd := cmd.register(fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandUsage(env.Stdout, cmd, fs)
			return 0
		}
		return fail(fmt.Errorf("%w: %s: %v (webhookctl %s --help)", ErrUsage, cmd.name, err, cmd.name))
	}
	if (cmd.nargs >= 0 && len(pos) != cmd.nargs) || (cmd.nargs < 0 && len(pos) != 0 && len(pos) != 2) {
		return fail(fmt.Errorf("%w: %s takes %s, got %d arguments (webhookctl %s --help)", ErrUsage, cmd.name, orNone(cmd.args), len(pos), cmd.name))
	}
	app, err := newApp(ctx, s, env)
	if err != nil {
		return fail(err)
	}
	if err := runCmd(ctx, app, pos); err != nil {
		return fail(err)
	}
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "no arguments"
	}
	return s
}

func findCommand(args []string) (command, []string, error) {
	cmds := commands()
	for _, n := range []int{2, 1} {
		if len(args) < n {
			continue
		}
		name := strings.Join(args[:n], " ")
		for _, c := range cmds {
			if c.name == name {
				return c, args[n:], nil
			}
		}
	}
	if args[0] == "events" || args[0] == "intents" || args[0] == "dlq" || args[0] == "projections" || args[0] == "warehouse" {
		var subs []string
		for _, c := range cmds {
			if strings.HasPrefix(c.name, args[0]+" ") {
				subs = append(subs, strings.TrimPrefix(c.name, args[0]+" "))
			}
		}
		return command{}, nil, fmt.Errorf("%w: %s needs a subcommand: %s", ErrUsage, args[0], strings.Join(subs, ", "))
	}
	return command{}, nil, fmt.Errorf("%w: unknown command %q (webhookctl --help)", ErrUsage, args[0])
}

// parseInterleaved lets flags follow positional arguments
// ("replay stripe evt_1 --reason x"), which flag.Parse alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func settingsFromEnv(getenv func(string) string) Settings {
	s := Settings{
		Table: getenv("TABLE_NAME"),
		Queues: Queues{
			Events: getenv("EVENTS_QUEUE_URL"), EventsDLQ: getenv("EVENTS_DLQ_URL"),
			Effects: getenv("EFFECTS_QUEUE_URL"), EffectsDLQ: getenv("EFFECTS_DLQ_URL"),
		},
		RetentionDays:   30,
		WarehouseBucket: getenv("WAREHOUSE_BUCKET"), WarehousePrefix: getenv("WAREHOUSE_PREFIX"),
		WarehouseProjections: getenv("WAREHOUSE_PROJECTIONS"),
	}
	if n, err := strconv.Atoi(getenv("RETENTION_DAYS")); err == nil && n > 0 {
		s.RetentionDays = n
	}
	s.DueShards = 4
	for _, v := range []string{"DUE_SHARDS", "DUE_SHARDS_READ"} {
		if n, err := strconv.Atoi(getenv(v)); err == nil && n > 0 {
			s.DueShards = n
		}
	}
	return s
}

// prefixFlag records whether --prefix was given at all ("" is a valid prefix).
type prefixFlag struct{ s *Settings }

func (p prefixFlag) String() string {
	if p.s == nil {
		return ""
	}
	return p.s.Prefix
}

func (p prefixFlag) Set(v string) error {
	p.s.Prefix, p.s.HavePrefix = v, true
	return nil
}

// addConnectionFlags registers the flags every command takes. The current
// values are the defaults, so the flags work before the command and after.
func addConnectionFlags(fs *flag.FlagSet, s *Settings) {
	fs.BoolVar(&s.Local, "local", s.Local, "use the make-dev stack: DynamoDB on DEV_DYNAMODB_ADDR (127.0.0.1:8000), SQS on DEV_SQS_ADDR (127.0.0.1:4100), table local-ledger, prefix local-, fake credentials")
	fs.StringVar(&s.Table, "table", s.Table, "ledger table (env TABLE_NAME)")
	fs.Var(prefixFlag{s}, "prefix", "queue name `prefix`: look queues up by name (GetQueueUrl) when no URL is given")
	fs.StringVar(&s.Queues.Events, "events-queue-url", s.Queues.Events, "events queue URL (env EVENTS_QUEUE_URL)")
	fs.StringVar(&s.Queues.EventsDLQ, "events-dlq-url", s.Queues.EventsDLQ, "events dead-letter queue URL (env EVENTS_DLQ_URL)")
	fs.StringVar(&s.Queues.Effects, "effects-queue-url", s.Queues.Effects, "effects queue URL (env EFFECTS_QUEUE_URL)")
	fs.StringVar(&s.Queues.EffectsDLQ, "effects-dlq-url", s.Queues.EffectsDLQ, "effects dead-letter queue URL (env EFFECTS_DLQ_URL)")
	fs.StringVar(&s.Actor, "actor", s.Actor, "who you are, for the audit trail (default $USER@hostname); a write also records the ARN of your AWS credentials (the region's sts:GetCallerIdentity, no endpoint override), or the local user with --local")
	fs.BoolVar(&s.JSON, "json", s.JSON, "print JSON instead of a table")
	fs.IntVar(&s.RetentionDays, "retention-days", s.RetentionDays, "days a resolved intent is kept (env RETENTION_DAYS)")
	fs.IntVar(&s.DueShards, "due-shards", s.DueShards, "due-index shards to read: the stack's dueShardsRead (env DUE_SHARDS_READ, else DUE_SHARDS)")
	fs.StringVar(&s.WarehouseBucket, "warehouse-bucket", s.WarehouseBucket, "the warehouse sink's S3 bucket (env WAREHOUSE_BUCKET; --local: local-warehouse unless DEV_WAREHOUSE=off)")
	fs.StringVar(&s.WarehousePrefix, "warehouse-prefix", s.WarehousePrefix, "the warehouse records' key prefix (env WAREHOUSE_PREFIX; --local: records)")
	fs.StringVar(&s.WarehouseProjections, "warehouse-projections", s.WarehouseProjections, "the projections whose revisions are recorded, comma-separated, or * for all (env WAREHOUSE_PROJECTIONS, as the functions have it; default all)")
}

func printTopUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageTop)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit status: 0 done, 1 failed, refused or incomplete, 2 bad usage or configuration.")
}

func printCommandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: webhookctl %s [flags] %s\n\n%s\n\nFlags:\n", c.name, c.args, c.about)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// newApp checks the settings and builds the clients and the ledger.
func newApp(ctx context.Context, s Settings, env Env) (*App, error) {
	if s.Local {
		if s.Table == "" {
			s.Table = LocalTable
		}
		if !s.HavePrefix {
			s.Prefix, s.HavePrefix = LocalPrefix, true
		}
		// The make-dev stack runs the warehouse sink unless told not to.
		if off := strings.ToLower(env.Getenv("DEV_WAREHOUSE")); s.WarehouseBucket == "" && off != "off" && off != "0" && off != "false" {
			s.WarehouseBucket = LocalWarehouseBucket
			if s.WarehousePrefix == "" {
				s.WarehousePrefix = LocalWarehousePrefix
			}
		}
	}
	if s.Table == "" {
		return nil, fmt.Errorf("%w: no ledger table: set --table or TABLE_NAME (or --local for the `make dev` stack)", ErrConfig)
	}
	if s.RetentionDays < 4 {
		return nil, fmt.Errorf("%w: --retention-days must be at least 4", ErrConfig)
	}
	// Who the audit names (identity.go): the claimed name here, the
	// verified identity when a command writes (App.actor).
	if s.Actor != "" && !validClaim(s.Actor) {
		return nil, fmt.Errorf("%w: --actor %q: control characters and parentheses are not allowed (the audit puts your verified identity in parentheses after it)", ErrUsage, s.Actor)
	}
	user := env.Getenv("USER")
	if user == "" {
		user = env.Getenv("LOGNAME")
	}
	host, err := env.Hostname()
	if err != nil {
		host = ""
	}
	claim := s.Actor
	if claim == "" && user != "" {
		claim = user
		if host != "" {
			claim += "@" + host
		}
		if !validClaim(claim) {
			claim = "" // the verified identity alone
		}
	}
	if env.Connect == nil {
		return nil, fmt.Errorf("%w: no way to connect", ErrConfig)
	}
	c, err := env.Connect(ctx, s, env.Getenv)
	if err != nil {
		return nil, err
	}
	var verifier Verifier
	switch {
	case s.Local:
		local, err := env.LocalUser()
		if err != nil || !validClaim(local) {
			local = user
		}
		verifier = LocalUser{User: local, Host: host}
	case c.STS != nil:
		verifier = CallerARN{Client: c.STS}
	}
	// The ledger's own actor names automatic writes, which webhookctl never
	// makes; every operator write passes App.actor's verified one.
	// An operator's move (hold, replay) may put an item on any shard below
	// the read width, and the functions read them all: only the read
	// width must match the stack's.
	l, err := ledger.New(c.DynamoDB, ledger.Options{Table: s.Table, Clock: env.Clock, Actor: "webhookctl", Retention: time.Duration(s.RetentionDays) * 24 * time.Hour,
		DueShards: min(4, max(s.DueShards, 1)), DueShardsRead: max(s.DueShards, 1)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	q := s.Queues
	q.Prefix, q.HavePrefix = s.Prefix, s.HavePrefix
	a := &App{Ledger: l, Scanner: c.DynamoDB, SQS: c.SQS, Queues: q, Out: env.Stdout, Err: env.Stderr, Clock: env.Clock,
		Claim: claim, Verifier: verifier, JSON: s.JSON, NewLimiter: env.NewLimiter, S3: c.S3}
	if s.WarehouseBucket != "" {
		w, err := warehouse.Load(func(k string) string {
			return map[string]string{"WAREHOUSE_BUCKET": s.WarehouseBucket, "WAREHOUSE_PREFIX": s.WarehousePrefix, "WAREHOUSE_PROJECTIONS": s.WarehouseProjections}[k]
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		a.Warehouse = &Warehouse{Bucket: w.Bucket, Prefix: w.Prefix, Projections: w.Projections}
	}
	return a, nil
}

// parseStatuses splits "DEAD,QUARANTINED".
func parseStatuses(v string) []ledger.Status {
	var out []ledger.Status
	for _, p := range strings.Split(v, ",") {
		if p = strings.ToUpper(strings.TrimSpace(p)); p != "" {
			out = append(out, ledger.Status(p))
		}
	}
	return out
}

// parseAge is time.ParseDuration plus a "d" suffix for days ("2d", "1d12h").
func parseAge(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	var days time.Duration
	if i := strings.Index(v, "d"); i > 0 {
		n, err := strconv.Atoi(v[:i])
		if err != nil {
			return 0, fmt.Errorf("%w: --older-than %q: want a duration like 90m, 6h or 2d", ErrUsage, v)
		}
		days, v = time.Duration(n)*24*time.Hour, v[i+1:]
	}
	var d time.Duration
	if v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("%w: --older-than %q: want a duration like 90m, 6h or 2d", ErrUsage, v)
		}
	}
	if days+d < 0 {
		return 0, fmt.Errorf("%w: --older-than must not be negative", ErrUsage)
	}
	return days + d, nil
}

// ParseRate reads "N/s", "N/m" or "N" (per second) as the interval between
// two replays.
func ParseRate(v string) (time.Duration, error) {
	num, unit, _ := strings.Cut(v, "/")
	per := time.Second
	switch unit {
	case "", "s":
	case "m":
		per = time.Minute
	default:
		return 0, fmt.Errorf("%w: --rate %q: want N/s or N/m", ErrUsage, v)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 || n > 1000 {
		return 0, fmt.Errorf("%w: --rate %q: want a number between 0 and 1000 per second or minute, like 5/s", ErrUsage, v)
	}
	return time.Duration(float64(per) / n), nil
}

func commands() []command {
	return []command{
		{name: "events list", about: "List events. Open statuses (RECEIVED, PROCESSING, RETRY_WAIT, DEAD, QUARANTINED) come from the\n" +
			"sparse due index, oldest first, no scan. PROCESSED events are not on it: add --scan to scan the\n" +
			"table, which DynamoDB bills for every item read, matching or not; it stops at --limit.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				status := fs.String("status", "", "comma-separated statuses (default: every open status)")
				source := fs.String("source", "", "only this source")
				typ := fs.String("type", "", "only this event type")
				older := fs.String("older-than", "", "only items due or waiting for at least this long (90m, 6h, 2d)")
				limit := fs.Int("limit", 50, "most events to list")
				scan := fs.Bool("scan", false, "scan the table (needed for PROCESSED; costly)")
				return func(ctx context.Context, a *App, _ []string) error {
					d, err := parseAge(*older)
					if err != nil {
						return err
					}
					return a.EventsList(ctx, EventQuery{Statuses: parseStatuses(*status), Source: *source, EventType: *typ, OlderThan: d, Limit: *limit, Scan: *scan})
				}
			}},
		{name: "events show", args: "SOURCE EVENT_ID", nargs: 2, about: "Show one event: identities, status, attempts, its deliveries (count, first, last, a bounded\n" +
			"sample of recent ones), the result with its intents' operation ids, a payload summary (size,\n" +
			"sha256, top-level JSON keys) and its audit trail. The payload body only with --payload.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				body := fs.Bool("payload", false, "also print the payload body")
				return func(ctx context.Context, a *App, args []string) error {
					return a.EventsShow(ctx, args[0], args[1], *body)
				}
			}},
		{name: "replay", args: "[SOURCE EVENT_ID]", nargs: -1, about: "Replay a DEAD or QUARANTINED event with its original identity: back to RECEIVED, the audit\n" +
			"records you and your reason, and a pointer goes on the events queue. If that send fails the\n" +
			"event stays RECEIVED and the reconciler re-enqueues it.\n" +
			"Without SOURCE EVENT_ID, replays every event in --status (DEAD or QUARANTINED) that matches\n" +
			"--source/--type, oldest first, at --rate, printing progress. Interrupted, it resumes when run\n" +
			"again: replayed events are no longer DEAD, and --checkpoint FILE skips those it replayed even\n" +
			"if they died again.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
				status := fs.String("status", "", "bulk: DEAD or QUARANTINED")
				source := fs.String("source", "", "bulk: only this source")
				typ := fs.String("type", "", "bulk: only this event type")
				rate := fs.String("rate", "5/s", "bulk: most replays per second (N/s) or minute (N/m)")
				cpFile := fs.String("checkpoint", "", "bulk: file recording progress, to resume without double replays")
				limit := fs.Int("limit", 500, "bulk: most events per run")
				dry := fs.Bool("dry-run", false, "bulk: list what would be replayed, change nothing")
				return func(ctx context.Context, a *App, args []string) error {
					if len(args) == 2 {
						if *status != "" {
							return fmt.Errorf("%w: give SOURCE EVENT_ID or --status, not both", ErrUsage)
						}
						return a.Replay(ctx, args[0], args[1], *reason)
					}
					if *status == "" {
						return fmt.Errorf("%w: replay takes SOURCE EVENT_ID, or --status DEAD|QUARANTINED for a bulk replay", ErrUsage)
					}
					interval, err := ParseRate(*rate)
					if err != nil {
						return err
					}
					return a.BulkReplay(ctx, BulkQuery{Status: ledger.Status(strings.ToUpper(*status)), Source: *source, EventType: *typ, Reason: *reason,
						Interval: interval, Checkpoint: *cpFile, Limit: *limit, DryRun: *dry})
				}
			}},
		{name: "quarantine", args: "SOURCE EVENT_ID", nargs: 2, about: "Hold an event for an operator: RECEIVED, RETRY_WAIT, DEAD, or PROCESSING with an expired lease\n" +
			"becomes QUARANTINED (audit action \"hold\", with you and your reason). A live lease or a finished\n" +
			"event is refused. Undo with release.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
				return func(ctx context.Context, a *App, args []string) error {
					return a.Quarantine(ctx, args[0], args[1], *reason)
				}
			}},
		{name: "release", args: "SOURCE EVENT_ID", nargs: 2, about: "Release a QUARANTINED event: back to RECEIVED with its identity (audit action \"replay\", with you\n" +
			"and your reason) and enqueued. A DEAD event is replayed instead.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
				return func(ctx context.Context, a *App, args []string) error {
					return a.Release(ctx, args[0], args[1], *reason)
				}
			}},
		{name: "intents list", about: "List open outbox intents (PENDING, DISPATCHING, RETRY_WAIT, UNCERTAIN) and those waiting for\ntheir owner (QUARANTINED; CONTRADICTED: performed, then a newer revision removed its reason)\nfrom the due index, oldest first.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				status := fs.String("status", "", "comma-separated statuses (default: every open status)")
				limit := fs.Int("limit", 50, "most intents to list")
				return func(ctx context.Context, a *App, _ []string) error {
					return a.IntentsList(ctx, parseStatuses(*status), *limit)
				}
			}},
		{name: "intents show", args: "OPERATION_ID", nargs: 1, about: "Show one intent: kind, subject, cause, status, attempts, timings and its audit trail.\nThe payload's values only with --payload.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				body := fs.Bool("payload", false, "also print the payload values")
				return func(ctx context.Context, a *App, args []string) error { return a.IntentsShow(ctx, args[0], *body) }
			}},
		{name: "intents resolve", args: "OPERATION_ID", nargs: 1, about: "Record the outcome you verified with the downstream for an intent the dispatcher could not settle\n" +
			"(UNCERTAIN, RETRY_WAIT, QUARANTINED, or DISPATCHING with an expired lease): SUCCEEDED or FAILED;\n" +
			"or close a CONTRADICTED one (performed, then contradicted) once you have contained it,\n" +
			"audited as \"resolve\" with you and your reason. Finished, PENDING and live-leased intents are refused.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				outcome := fs.String("outcome", "", "succeeded or failed (required)")
				reason := fs.String("reason", "", "what you verified downstream (required; recorded in the audit trail)")
				return func(ctx context.Context, a *App, args []string) error {
					return a.IntentsResolve(ctx, args[0], *outcome, *reason)
				}
			}},
		{name: "stats", about: "The dashboard: events accepted but not finished by status, the oldest unfinished,\n" +
			"DEAD and QUARANTINED, intents by status, and each dead-letter queue's depth. Counts come from the\n" +
			"due index, each capped at --max (a capped count is shown as N+). With a warehouse configured\n" +
			"(--warehouse-bucket, WAREHOUSE_BUCKET, --local), also \"canonical revision != warehouse revision\":\n" +
			"the subjects changed in the last day whose current version has no record in the warehouse, counted\n" +
			"as the reconciler's warehouse check counts them (at most 100, a HeadObject each), and the oldest's age.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				maxN := fs.Int("max", 1000, "cap on each count")
				return func(ctx context.Context, a *App, _ []string) error { return a.Stats(ctx, *maxN) }
			}},
		{name: "projections show", args: "PROJECTION SUBJECT", nargs: 2, about: "Show one projection subject (PROJECTION is its ledger name, <scope>/<name>, as events show prints it;\n" +
			"a bare <name> is its scope's when exactly one scope has that subject, found by scanning the table):\n" +
			"its canonical version, terminal, last event and state keys (values with --state), and with a warehouse\n" +
			"configured the warehouse's version (the highest it has a record of) and the status of the canonical\n" +
			"version's record: WAREHOUSE_OBSERVED (its intent SUCCEEDED: the store answered it exists),\n" +
			"WAREHOUSE_PENDING (its intent waits: PENDING, DISPATCHING, RETRY_WAIT, UNCERTAIN), WAREHOUSE_MISSING\n" +
			"(no intent will write it: warehouse backfill, or the reconciler, does) or WAREHOUSE_REFUSED (its intent\n" +
			"ended QUARANTINED or FAILED).",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				state := fs.Bool("state", false, "also print the state's values")
				return func(ctx context.Context, a *App, args []string) error {
					return a.ProjectionsShow(ctx, args[0], args[1], *state)
				}
			}},
		{name: "warehouse backfill", about: "Rebuild the warehouse from the canonical state: for every projection (or --projection's), page by\n" +
			"page, ask S3 for the record of its current version; when it is missing, write the record's intent as\n" +
			"the reconciler does (its own when none exists; a repair carrying the same record when its intent\n" +
			"ended without the object being there), audited as \"backfill\" with you and your reason, and announce it\n" +
			"on the effects queue: the dispatcher writes the record. A record present or an intent already waiting\n" +
			"writes nothing, so a second run adds nothing. Each page prints a cursor; --cursor resumes there. It\n" +
			"scans the table (billed per item read), at most --page items per request.",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				proj := fs.String("projection", "", "only this projection's subjects (its ledger name, <scope>/<name>; a bare <name> when exactly one scope has it)")
				reason := fs.String("reason", "", "why (required unless --dry-run; recorded in the audit trail of every intent written)")
				dry := fs.Bool("dry-run", false, "say what would be written, write nothing")
				cursor := fs.String("cursor", "", "resume where a backfill stopped (the cursor it printed)")
				page := fs.Int("page", 500, "table items read per Scan request")
				limit := fs.Int("limit", 1000, "most projections per run (it stops at the end of the page that reaches it)")
				return func(ctx context.Context, a *App, _ []string) error {
					return a.WarehouseBackfill(ctx, BackfillQuery{Projection: *proj, Reason: *reason, DryRun: *dry, Cursor: *cursor, Page: *page, Limit: *limit})
				}
			}},
		{name: "dlq status", about: "Each dead-letter queue's depth (visible + in flight) and the age of the oldest of up to 10 sampled\n" +
			"messages (a peek: received with SentTimestamp, made visible again at once, never deleted).",
			register: func(fs *flag.FlagSet) func(context.Context, *App, []string) error {
				return func(ctx context.Context, a *App, _ []string) error { return a.DLQStatus(ctx) }
			}},
	}
}
