package capacity

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
)

// BenchmarkIntakeSide runs each contender of MeasureIntakeSide alone, for
// a CPU profile of one of them:
//
//	go test -run '^$' -bench 'IntakeSide/ours' -cpuprofile /tmp/intake.prof ./internal/harness/capacity/
func BenchmarkIntakeSide(b *testing.B) {
	ctx := context.Background()
	rg, err := newSideRig(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer rg.close()
	for _, c := range []struct {
		name string
		h    lambda.Handler
	}{{"ours", lambda.NewHandler(rg.ours.HandleHTTPAPI)}, {"bare", lambda.NewHandler(rg.bare.HandleHTTPAPI)}} {
		for _, size := range []int{1 << 10, 4 << 10} {
			b.Run(c.name+"/"+sizeName(size), func(b *testing.B) {
				payloads, err := rg.prepare(c.name, "bench", size, b.N)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				var dups int
				if _, err := deliverAll(ctx, c.h, payloads, &dups); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return string(rune('0'+n/1024)) + "KB"
	}
	return "B"
}
