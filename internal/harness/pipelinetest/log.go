package pipelinetest

import (
	"io"
	"log/slog"
	"os"
)

// quietLog discards logs unless PIPELINE_LOG=1.
func quietLog() *slog.Logger {
	if os.Getenv("PIPELINE_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
