package config

import "fmt"

// LoadBridge reads the bridge function's variables: the intake's
// (TABLE_NAME, EVENTS_QUEUE_URL, SOURCES or SOURCES_FILE and the common
// ones). The bridge reads no secrets, but it refuses to start when no
// source's delivery includes eventbridge: it would refuse every event.
func LoadBridge(getenv func(string) string) (Intake, error) {
	in, err := LoadIntake(getenv)
	if err != nil {
		return Intake{}, err
	}
	if len(in.Sources.EventBridgeSources()) == 0 {
		return Intake{}, fmt.Errorf("%w: SOURCES: no source has delivery eventbridge or https+eventbridge (the bridge would refuse every event)", ErrConfig)
	}
	return in, nil
}
