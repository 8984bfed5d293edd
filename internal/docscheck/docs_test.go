package docscheck_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/effectively-once/webhooks/internal/operator"
)

// module is this repository's module path: a command that names a package
// by it (go run github.com/effectively-once/webhooks/scripts/webhookctl)
// is checked like one that names it by a relative path.
const module = "github.com/effectively-once/webhooks"

// checkedPages are the pages whose links, commands and citations are
// checked, relative to the repository's root; docs/*.md is added by glob,
// so a new page is checked without editing this list.
var checkedPages = []string{"README.md", "examples/shop/README.md", "examples/saas/README.md"}

// TestDocsLinksResolve: every relative Markdown link of a checked page
// names a file or directory of the repository, and a #anchor names a
// heading of the Markdown file it points into (GitHub's slugs).
func TestDocsLinksResolve(t *testing.T) {
	c := loadCorpus(t)
	for _, p := range c.pages {
		for _, prob := range c.checkLinks(p) {
			t.Error(prob)
		}
	}
}

// TestDocsCommandsExist: in every sh, bash, shell or console block of a
// checked page, each make target is defined by the nearest Makefile, each
// go run / go test / go build / go vet names an existing package
// directory, and each webhookctl command line is one the CLI accepts, its
// command, subcommand and flags included.
func TestDocsCommandsExist(t *testing.T) {
	c := loadCorpus(t)
	for _, p := range c.pages {
		for _, prob := range c.checkCommands(p) {
			t.Error(prob)
		}
	}
}

// TestConfigurationVariablesExist: every environment variable that
// docs/configuration.md names in a table row (as `NAME`) is a string
// literal of the non-test Go source ("NAME" or "NAME=…"), so the page
// cannot document a variable nothing reads any more.
func TestConfigurationVariablesExist(t *testing.T) {
	c := loadCorpus(t)
	p, ok := c.byPath["docs/configuration.md"]
	if !ok {
		t.Fatal("docs/configuration.md is missing")
	}
	names := tableVariables(p)
	if len(names) < 20 {
		t.Fatalf("docs/configuration.md names %d variables in its tables; the check found nothing to check", len(names))
	}
	for _, prob := range c.checkVariables(p, names) {
		t.Error(prob)
	}
}

// TestDocsCiteNothingOutsideTheRepository: the pages stand on their own,
// so none cites a design document, an issue number or a numbered seed that
// a reader of this repository cannot open.
func TestDocsCiteNothingOutsideTheRepository(t *testing.T) {
	c := loadCorpus(t)
	for _, p := range c.pages {
		for _, prob := range checkCitations(p) {
			t.Error(prob)
		}
	}
}

// TestTheChecksCatchWhatTheyLookFor plants one mistake of each kind in a
// page that is not on disk and requires each check to report it: a check
// that passes on everything would otherwise look the same as one that
// passes on good documentation.
func TestTheChecksCatchWhatTheyLookFor(t *testing.T) {
	c := loadCorpus(t)
	planted := parsePage("docs/planted.md", strings.Join([]string{
		"# Planted",
		"",
		"A [missing page](no-such-page.md), a [missing heading](architecture.md#no-such-heading),",
		"a [link out of the repository](../../outside.md), and a [good one](architecture.md#invariants).",
		"",
		"```sh",
		"make no-such-target",
		"make test",
		"go run ./scripts/no-such-script",
		"go test ./internal/no/such/package/...",
		"./webhookctl --local events frobnicate",
		"./webhookctl --local replay stripe evt_1 --no-such-flag x --reason r",
		"./webhookctl --local stats",
		"```",
		"",
		"| variable | what |",
		"|---|---|",
		"| `NO_SUCH_VARIABLE_ANYWHERE` | nothing reads it |",
		"| `TABLE_NAME` | the ledger |",
		"",
		"See issue 12 and DESIGN.md §5, and seed 003.",
	}, "\n"))
	want := map[string][]string{
		"links": {"no-such-page.md", "no-such-heading", "outside.md"},
		"commands": {"no-such-target", "scripts/no-such-script", "internal/no/such/package",
			"events frobnicate", "no-such-flag"},
		"variables": {"NO_SUCH_VARIABLE_ANYWHERE"},
		"citations": {"issue 12", "DESIGN.md", "§", "seed 003"},
	}
	got := map[string][]string{
		"links":     c.checkLinks(planted),
		"commands":  c.checkCommands(planted),
		"variables": c.checkVariables(planted, tableVariables(planted)),
		"citations": checkCitations(planted),
	}
	for kind, needles := range want {
		if len(got[kind]) != len(needles) {
			t.Errorf("%s: %d problems, want %d (one per plant): %q", kind, len(got[kind]), len(needles), got[kind])
		}
		for _, n := range needles {
			if !containsAny(got[kind], n) {
				t.Errorf("%s: the plant %q was not reported: %q", kind, n, got[kind])
			}
		}
	}
}

func containsAny(list []string, s string) bool {
	for _, l := range list {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// TestSlugsAreGitHubs pins the heading slugs anchors are checked against
// to what GitHub renders for the kinds of headings these pages use.
func TestSlugsAreGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"Run it locally: `make dev`":                             "run-it-locally-make-dev",
		"Drift: canonical revision != warehouse revision":        "drift-canonical-revision--warehouse-revision",
		"The `DEV_*` variables: ports, instances, timings":       "the-dev_-variables-ports-instances-timings",
		"Stripe (`\"kind\": \"stripe\"`)":                        "stripe-kind-stripe",
		"Scale: what binds first, from 10 to 5,000 events/s":     "scale-what-binds-first-from-10-to-5000-eventss",
		"A team's mistakes cost nothing else":                    "a-teams-mistakes-cost-nothing-else",
		"Who the audit names (I6)":                               "who-the-audit-names-i6",
		"See [the local stack](local-stack.md) — and the demo":   "see-the-local-stack--and-the-demo",
		"Thin events (Stripe's recommended format for new ones)": "thin-events-stripes-recommended-format-for-new-ones",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestShellWordsAreTheShells pins how command lines are split into the
// words the command checks look at.
func TestShellWordsAreTheShells(t *testing.T) {
	for line, want := range map[string]string{
		`make test 2>&1 | tee make.log`:                                                `[[make test] [tee make.log]]`,
		`DEV_FAST=1 make dev &  make demo   # two commands`:                            `[[DEV_FAST=1 make dev] [make demo]]`,
		`orphan=$(./webhookctl --local events list | awk '$2 ~ /x/ {print $2; exit}')`: `[[orphan=] [./webhookctl --local events list] [awk $2 ~ /x/ {print $2; exit}]]`,
		`./webhookctl replay stripe "$o" --reason "account created (INC-7)" # why`:     `[[./webhookctl replay stripe $o --reason account created (INC-7)]]`,
		`make warehouse SQL="SELECT state->>'status' FROM records" > /tmp/out.txt`:     `[[make warehouse SQL=SELECT state->>'status' FROM records]]`,
		`body='{"id":"evt_'$(date +%s)'"}'`:                                            `[[body={"id":"evt_] [date +%s] ["}]]`,
	} {
		if got := fmt.Sprint(simpleCommands(line)); got != want {
			t.Errorf("simpleCommands(%q) = %s, want %s", line, got, want)
		}
	}
}

// corpus is the repository as the checks see it, read once per test
// binary.
type corpus struct {
	root     string
	pages    []*page
	byPath   map[string]*page
	mu       sync.Mutex
	headings map[string]map[string]bool // Markdown file → its anchors
	targets  map[string]map[string]bool // Makefile → its targets
	literals map[string]bool            // "NAME" literals of the non-test Go source
}

var (
	corpusOnce sync.Once
	theCorpus  *corpus
	corpusErr  error
)

func loadCorpus(t *testing.T) *corpus {
	t.Helper()
	corpusOnce.Do(func() { theCorpus, corpusErr = readCorpus() })
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return theCorpus
}

func readCorpus() (*corpus, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	rels := append([]string{}, checkedPages...)
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		rels = append(rels, filepath.ToSlash(rel))
	}
	if len(docs) < 10 {
		return nil, fmt.Errorf("docs/ holds %d pages; the check expects the documentation there", len(docs))
	}
	c := &corpus{root: root, byPath: map[string]*page{}, headings: map[string]map[string]bool{}, targets: map[string]map[string]bool{}}
	for _, rel := range rels {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		p := parsePage(rel, string(b))
		c.pages = append(c.pages, p)
		c.byPath[rel] = p
	}
	return c, nil
}

var moduleLineRE = regexp.MustCompile(`(?m)^module\s+` + regexp.QuoteMeta(module) + `\s*$`)

// repoRoot is the directory above the working directory (the test's
// package directory) whose go.mod declares this module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && moduleLineRE.Match(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", module)
		}
		dir = parent
	}
}

// page is one Markdown file split into its prose (fenced blocks blanked
// out, line numbers kept) and its fenced code blocks.
type page struct {
	path   string // relative to the root, with slashes
	prose  string
	blocks []block
}

type block struct {
	lang  string
	line  int // of the first line inside the fence
	lines []string
}

var fenceRE = regexp.MustCompile("^(```+|~~~+)\\s*([^`\\s]*)")

// parsePage splits a page. A fence may be indented (inside a list item); it
// closes at a line of nothing but at least as many of the same fence
// characters.
func parsePage(path, text string) *page {
	p := &page{path: path}
	var prose []string
	var cur *block
	var fence string
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if cur != nil {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				p.blocks = append(p.blocks, *cur)
				cur = nil
			} else {
				cur.lines = append(cur.lines, line)
			}
			prose = append(prose, "")
			continue
		}
		if m := fenceRE.FindStringSubmatch(trimmed); m != nil {
			fence = m[1]
			cur = &block{lang: strings.ToLower(m[2]), line: i + 2}
			prose = append(prose, "")
			continue
		}
		prose = append(prose, line)
	}
	if cur != nil { // an unclosed fence runs to the end, as in GitHub's rendering
		p.blocks = append(p.blocks, *cur)
	}
	p.prose = strings.Join(prose, "\n")
	return p
}

// lineOf is the 1-based line of an offset into the prose.
func (p *page) lineOf(off int) int { return strings.Count(p.prose[:off], "\n") + 1 }

// withoutCode is the prose with every inline code span blanked (newlines
// kept, so offsets and lines stay), since a link inside backticks is text.
// A span opens with a run of n backticks and closes at the next run of
// exactly n; an opening run that never closes is literal text.
func withoutCode(s string) string {
	b := []byte(s)
	run := func(i int) int { // the length of the backtick run at i
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		return n
	}
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := run(i)
		end := -1
		for j := i + n; j < len(b); {
			if b[j] != '`' {
				j++
				continue
			}
			if m := run(j); m == n {
				end = j + m
				break
			} else {
				j += m
			}
		}
		if end < 0 {
			i += n
			continue
		}
		for j := i; j < end; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i = end
	}
	return string(b)
}

var (
	linkRE     = regexp.MustCompile(`\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE   = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

type link struct {
	target string
	line   int
}

func (p *page) links() []link {
	prose := withoutCode(p.prose)
	var out []link
	for _, m := range linkRE.FindAllStringSubmatchIndex(prose, -1) {
		out = append(out, link{target: prose[m[4]:m[5]], line: p.lineOf(m[0])})
	}
	for _, m := range refDefRE.FindAllStringSubmatchIndex(prose, -1) {
		out = append(out, link{target: prose[m[2]:m[3]], line: p.lineOf(m[0])})
	}
	return out
}

// slug is GitHub's anchor of a heading: the rendered text (inline code
// marks and link targets gone) in lower case, with letters, digits,
// hyphens and underscores kept, spaces turned to hyphens, and every other
// character dropped.
func slug(heading string) string {
	heading = linkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_', unicode.IsLetter(r), unicode.IsDigit(r), unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the headings' slugs of one Markdown file; a repeated slug
// gets -1, -2, … as on GitHub.
func anchors(text string) map[string]bool {
	p := parsePage("", text)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(p.prose, "\n") {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func (c *corpus) anchorsOf(abs string) (map[string]bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.headings[abs]; ok {
		return a, nil
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	a := anchors(string(b))
	c.headings[abs] = a
	return a, nil
}

// inside reports whether abs is the root or under it.
func (c *corpus) inside(abs string) bool {
	rel, err := filepath.Rel(c.root, abs)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func (c *corpus) checkLinks(p *page) []string {
	var probs []string
	bad := func(l link, format string, args ...any) {
		probs = append(probs, fmt.Sprintf("%s:%d: link %s: %s", p.path, l.line, l.target, fmt.Sprintf(format, args...)))
	}
	dir := filepath.Join(c.root, filepath.FromSlash(filepath.Dir(p.path)))
	for _, l := range p.links() {
		if schemeRE.MatchString(l.target) {
			continue // http(s), mailto: not this repository's
		}
		target, anchor, _ := strings.Cut(l.target, "#")
		if target == "" { // #anchor: a heading of this page
			if !anchors(p.prose)[anchor] {
				bad(l, "no heading with the anchor #%s on this page", anchor)
			}
			continue
		}
		unescaped, err := url.PathUnescape(target)
		if err != nil {
			bad(l, "not a valid path: %v", err)
			continue
		}
		abs := filepath.Join(dir, filepath.FromSlash(unescaped))
		if !c.inside(abs) {
			bad(l, "points outside the repository")
			continue
		}
		st, err := os.Stat(abs)
		if err != nil {
			bad(l, "no such file or directory")
			continue
		}
		if anchor == "" {
			continue
		}
		if st.IsDir() || !strings.HasSuffix(abs, ".md") {
			bad(l, "an anchor into something that is not a Markdown file")
			continue
		}
		a, err := c.anchorsOf(abs)
		if err != nil {
			bad(l, "%v", err)
			continue
		}
		if !a[anchor] {
			bad(l, "no heading with the anchor #%s in %s", anchor, relTo(c.root, abs))
		}
	}
	return probs
}

func relTo(root, abs string) string {
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(rel)
}

// shellBlock reports whether a fenced block's commands are checked.
func shellBlock(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console", "zsh":
		return true
	}
	return false
}

// cmdLine is one logical command line of a block and the page line it
// starts on.
type cmdLine struct {
	text string
	line int
}

// commandLines are a block's logical command lines: continuation
// backslashes joined, a console block's output (lines without a "$ "
// prompt) left out.
func commandLines(b block) []cmdLine {
	var out []cmdLine
	var acc strings.Builder
	start := 0
	for i, l := range b.lines {
		if b.lang == "console" && acc.Len() == 0 {
			t := strings.TrimLeft(l, " ")
			if !strings.HasPrefix(t, "$ ") {
				continue
			}
			l = strings.TrimPrefix(t, "$ ")
		}
		if acc.Len() == 0 {
			start = b.line + i
		}
		if strings.HasSuffix(l, `\`) {
			acc.WriteString(strings.TrimSuffix(l, `\`))
			acc.WriteByte(' ')
			continue
		}
		acc.WriteString(l)
		out = append(out, cmdLine{acc.String(), start})
		acc.Reset()
	}
	if acc.Len() > 0 {
		out = append(out, cmdLine{acc.String(), start})
	}
	return out
}

// simpleCommands splits one shell line into its simple commands' words:
// quotes are honoured (and removed), a word starting with # begins a
// comment, and |, &, ;, (, ) and $( end a command. A redirection (<, >,
// >>, 2>&1) and its file are not words of the command. Variables and
// substitutions stay as written; the checks only look at literal words.
func simpleCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	skipNext := false // the next word is a redirection's file
	endWord := func() {
		if inWord {
			if skipNext {
				skipNext = false
			} else {
				words = append(words, w.String())
			}
			w.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'':
			inWord = true
			for i++; i < len(rs) && rs[i] != '\''; i++ {
				w.WriteRune(rs[i])
			}
		case r == '"':
			inWord = true
			for i++; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) {
					i++
				}
				w.WriteRune(rs[i])
			}
		case r == '\\' && i+1 < len(rs):
			inWord = true
			i++
			w.WriteRune(rs[i])
		case r == '#' && !inWord:
			endCmd()
			return cmds
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			endCmd()
			i++
		case r == '<' || r == '>':
			if inWord && strings.Trim(w.String(), "0123456789") == "" {
				w.Reset() // the descriptor of 2>: not an argument
				inWord = false
			} else {
				endWord()
			}
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++ // >>, >&
			}
			skipNext = true
		case strings.ContainsRune("|&;()", r):
			endCmd()
		case unicode.IsSpace(r):
			endWord()
		default:
			inWord = true
			w.WriteRune(r)
		}
	}
	endCmd()
	return cmds
}

var assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// goValueFlags are the go command's flags that take a value as the next
// word, so that word is not taken for a package.
var goValueFlags = map[string]bool{
	"-o": true, "-tags": true, "-ldflags": true, "-gcflags": true, "-run": true, "-bench": true,
	"-count": true, "-timeout": true, "-fuzz": true, "-fuzztime": true, "-parallel": true,
	"-benchtime": true, "-C": true, "-p": true, "-mod": true, "-exec": true, "-skip": true,
	"-coverprofile": true, "-cpu": true, "-modfile": true,
}

func (c *corpus) checkCommands(p *page) []string {
	var probs []string
	for _, b := range p.blocks {
		if !shellBlock(b.lang) {
			continue
		}
		// Commands run from the page's own directory: the root for the
		// README and docs/, an example module for its README ("from this
		// directory"). A cd in the block moves it for what follows.
		dir := filepath.Join(c.root, filepath.FromSlash(filepath.Dir(p.path)))
		if strings.HasPrefix(p.path, "docs/") {
			dir = c.root
		}
		for _, cl := range commandLines(b) {
			for _, words := range simpleCommands(cl.text) {
				for len(words) > 0 && assignRE.MatchString(words[0]) {
					words = words[1:]
				}
				if len(words) == 0 {
					continue
				}
				bad := func(format string, args ...any) {
					probs = append(probs, fmt.Sprintf("%s:%d: %s", p.path, cl.line, fmt.Sprintf(format, args...)))
				}
				switch cmd := words[0]; {
				case cmd == "cd" && len(words) > 1 && !strings.ContainsAny(words[1], "$~"):
					dir = filepath.Join(dir, filepath.FromSlash(words[1]))
				case cmd == "make":
					c.checkMake(dir, words[1:], bad)
				case cmd == "go" && len(words) > 1:
					c.checkGo(dir, words[1], words[2:], bad)
				case filepath.Base(cmd) == "webhookctl":
					checkWebhookctl(words[1:], bad)
				}
			}
		}
	}
	return probs
}

func (c *corpus) checkMake(dir string, args []string, bad func(string, ...any)) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			i++
			dir = filepath.Join(dir, filepath.FromSlash(args[i]))
		case a == "-f" && i+1 < len(args):
			i++ // another makefile: not one these pages use
		case a == "-j" && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			i++
		case strings.HasPrefix(a, "-"), assignRE.MatchString(a):
		default:
			mk, targets, err := c.makefileFor(dir)
			if err != nil {
				bad("make %s: %v", a, err)
				return
			}
			if !targets[a] {
				bad("make %s: %s defines no target %q", a, relTo(c.root, mk), a)
			}
		}
	}
}

// makefileFor is the Makefile make would use from dir, or the nearest one
// above it within the repository (the shop's README runs the root's), and
// its targets.
func (c *corpus) makefileFor(dir string) (string, map[string]bool, error) {
	for d := dir; c.inside(d); d = filepath.Dir(d) {
		mk := filepath.Join(d, "Makefile")
		if _, err := os.Stat(mk); err != nil {
			if d == c.root {
				break
			}
			continue
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if t, ok := c.targets[mk]; ok {
			return mk, t, nil
		}
		t, err := makeTargets(mk)
		if err != nil {
			return "", nil, err
		}
		c.targets[mk] = t
		return mk, t, nil
	}
	return "", nil, fmt.Errorf("no Makefile at or above %s", relTo(c.root, dir))
}

// makeRuleRE matches a rule's line: targets, a colon that is not an
// assignment's := or ::=, and its prerequisites.
var makeRuleRE = regexp.MustCompile(`^([A-Za-z0-9_.%/$(){}-][^:=#]*?)\s*::?(?:[^=]|$)`)

// makeTargets are the explicit targets of a Makefile's rules: literal
// names, not patterns (%) or variables ($(…)), nor special targets (.PHONY).
func makeTargets(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") {
			continue // a recipe
		}
		m := makeRuleRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if strings.ContainsAny(t, "%$") || strings.HasPrefix(t, ".") {
				continue
			}
			out[t] = true
		}
	}
	return out, sc.Err()
}

func (c *corpus) checkGo(dir, sub string, args []string, bad func(string, ...any)) {
	switch sub {
	case "run", "test", "build", "vet", "list":
	default:
		return
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-args" {
			return
		}
		if strings.HasPrefix(a, "-") {
			if goValueFlags[a] && i+1 < len(args) {
				i++
			}
			continue
		}
		pkgDir, ok := c.packageDir(dir, a)
		if ok {
			if !isPackageDir(pkgDir, strings.HasSuffix(a, "...")) {
				bad("go %s %s: no Go package at %s", sub, a, relTo(c.root, pkgDir))
			}
		}
		if sub == "run" {
			// go run's first non-flag word is the program; the rest are its
			// arguments, and webhookctl's are checked as its command line.
			if ok && filepath.Base(pkgDir) == "webhookctl" {
				checkWebhookctl(args[i+1:], bad)
			}
			return
		}
	}
}

// packageDir is the directory a package argument names, if it names one
// of this repository: a relative path (./x, ../x, .) or this module's path.
func (c *corpus) packageDir(dir, arg string) (string, bool) {
	p := strings.TrimSuffix(strings.TrimSuffix(arg, "..."), "/")
	switch {
	case p == "." || p == ".." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../"):
		return filepath.Join(dir, filepath.FromSlash(p)), true
	case p == module:
		return c.root, true
	case strings.HasPrefix(p, module+"/"):
		return filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(p, module+"/"))), true
	}
	return "", false
}

// isPackageDir reports whether dir holds Go files (or, for a ./...
// pattern, whether it is a directory at all).
func isPackageDir(dir string, pattern bool) bool {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	if pattern {
		return true
	}
	goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(goFiles) > 0
}

// checkWebhookctl runs the documented command line through the CLI itself
// with --help appended: the CLI parses the connection flags, finds the
// command (two words, then one), parses its flags, and prints the
// command's help instead of connecting to anything. Exit 0 means every
// command, subcommand and flag of the line exists; an unknown one exits 2.
func checkWebhookctl(args []string, bad func(string, ...any)) {
	var stdout, stderr bytes.Buffer
	argv := append(append([]string{}, args...), "--help")
	code := operator.Run(context.Background(), argv, operator.Env{
		Getenv: func(string) string { return "" },
		Stdout: &stdout, Stderr: &stderr,
	})
	if code != 0 {
		bad("webhookctl %s: the CLI refuses it (exit %d): %s", strings.Join(args, " "), code, strings.TrimSpace(stderr.String()))
	}
}

// tableVariables are the `NAME`s in a page's table rows that look like
// environment variables (upper case, digits and underscores).
func tableVariables(p *page) []string {
	nameRE := regexp.MustCompile("`([A-Z][A-Z0-9_]*[A-Z0-9])`")
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(p.prose, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		for _, m := range nameRE.FindAllStringSubmatch(line, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	return out
}

func (c *corpus) checkVariables(p *page, names []string) []string {
	lits, err := c.goLiterals()
	if err != nil {
		return []string{err.Error()}
	}
	var probs []string
	for _, n := range names {
		if !lits[n] {
			probs = append(probs, fmt.Sprintf("%s: `%s` is in a table, but no non-test Go source has the literal %q or \"%s=…\"", p.path, n, n, n))
		}
	}
	return probs
}

// goLiterals are the upper-case string literals ("NAME", or the NAME of
// "NAME=value") of every non-test Go file of the repository, its other
// modules (infra/, examples/) included; dependencies, test data and build
// output are not the repository's source.
func (c *corpus) goLiterals() (map[string]bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.literals != nil {
		return c.literals, nil
	}
	litRE := regexp.MustCompile(`"([A-Z][A-Z0-9_]*)[="]`)
	lits := map[string]bool{}
	err := filepath.WalkDir(c.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", "build", "cdk.out", "vendor":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && path != c.root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range litRE.FindAllSubmatch(b, -1) {
			lits[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.literals = lits
	return lits, nil
}

// citationRE matches citations of what lies outside this repository: the
// design document, its § sections, issue numbers and numbered seeds. A
// test file's name (seed003_test.go) is the repository's own and does not
// match.
var citationRE = regexp.MustCompile(`(?i)\bDESIGN\.md\b|§|\bissues?\s+#?\d+|\bseeds?[ -]\d{3}\b`)

func checkCitations(p *page) []string {
	var probs []string
	report := func(text string, firstLine int) {
		for _, m := range citationRE.FindAllStringIndex(text, -1) {
			start := strings.LastIndex(text[:m[0]], "\n") + 1
			end := strings.Index(text[m[0]:], "\n")
			if end < 0 {
				end = len(text) - m[0]
			}
			line := firstLine + strings.Count(text[:m[0]], "\n")
			probs = append(probs, fmt.Sprintf("%s:%d: %q cites something outside this repository: %s",
				p.path, line, text[m[0]:m[1]], strings.TrimSpace(text[start:m[0]+end])))
		}
	}
	// The prose keeps one line per line of the page, fences blanked.
	report(p.prose, 1)
	for _, b := range p.blocks {
		report(strings.Join(b.lines, "\n"), b.line)
	}
	return probs
}
