// Command effectfn is a Lambda function for the tests of the dispatcher's
// Lambda target, run under aws-lambda-rie (localaws.StartFunction). It
// answers the target's JSON contract and is idempotent by operation_id,
// as a target function must be.
//
// It keeps its facts in the directory EFFECTFN_DIR: invocations.log gets
// the operation id of every invocation, applied.log the operation id of
// every call it applied (once per operation id). Each invocation takes
// the first line of the file script there (removing it) as what to do;
// an empty or missing script applies:
//
//	apply              apply (once per operation id) and answer applied
//	apply-sleep <ms>   apply, then sleep before answering (a timeout after applying)
//	sleep-apply <ms>   sleep, then apply and answer
//	error              fail with an unhandled error before applying
//	retry <seconds>    answer retry, without applying
//	reject <reason>    answer rejected, without applying
//	garbage            answer something outside the contract
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

type call struct {
	OperationID string `json:"operation_id"`
}

var mu sync.Mutex

func dir() string { return os.Getenv("EFFECTFN_DIR") }

func appendLine(name, line string) error {
	f, err := os.OpenFile(filepath.Join(dir(), name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	return err
}

func lines(name string) []string {
	b, _ := os.ReadFile(filepath.Join(dir(), name))
	return strings.Fields(string(b))
}

// next pops the first line of the script.
func next() string {
	path := filepath.Join(dir(), "script")
	b, err := os.ReadFile(path)
	if err != nil {
		return "apply"
	}
	ls := strings.SplitN(string(b), "\n", 2)
	rest := ""
	if len(ls) == 2 {
		rest = ls[1]
	}
	_ = os.WriteFile(path, []byte(rest), 0o644)
	if strings.TrimSpace(ls[0]) == "" {
		return "apply"
	}
	return strings.TrimSpace(ls[0])
}

func apply(op string) (replayed bool, err error) {
	applied := lines("applied.log")
	if slices.Contains(applied, op) {
		return true, nil
	}
	return false, appendLine("applied.log", op)
}

func handle(ctx context.Context, c call) (map[string]any, error) {
	mu.Lock()
	defer mu.Unlock()
	if err := appendLine("invocations.log", c.OperationID); err != nil {
		return nil, err
	}
	mode, arg, _ := strings.Cut(next(), " ")
	ms, _ := strconv.Atoi(arg)
	switch mode {
	case "apply", "apply-sleep", "sleep-apply":
		if mode == "sleep-apply" {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		replayed, err := apply(c.OperationID)
		if err != nil {
			return nil, err
		}
		if mode == "apply-sleep" {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		return map[string]any{"status": "applied", "replayed": replayed}, nil
	case "error":
		return nil, errors.New("effectfn: told to fail")
	case "retry":
		return map[string]any{"status": "retry", "retry_after_seconds": ms}, nil
	case "reject":
		return map[string]any{"status": "rejected", "reason": arg}, nil
	case "garbage":
		return map[string]any{"ok": true}, nil
	}
	return nil, errors.New("effectfn: unknown script line " + mode)
}

func main() {
	lambda.Start(handle)
}
