// Package fulfilment is the shop's shipping service in miniature: the
// Lambda function the dispatcher invokes for the ship_order effect (an
// AWS target, "target": the function's ARN, in EFFECTS). It implements
// the target contract of the pipeline's outbox: the event is the call
// (operation_id, kind, scope, source, subject, version, payload), the
// answer {"status":"applied"|"retry"|"rejected"}.
//
// Lambda runs every invocation it accepts and cannot say afterwards
// whether one ran, so the function itself is idempotent by operation id:
// it keeps the operation ids it shipped, and answers a repeat with
// {"status":"applied","replayed":true} without shipping again. Here they
// are kept in a file of its own (one JSON line per shipment), which the
// local stack gives every effect function in LOCAL_STATE_DIR; a deployed
// shipping service keeps them in its own table, written in the same
// conditional step as the shipment.
package fulfilment

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Kind is the intent kind the function performs.
const Kind = "ship_order"

// Call is the event the dispatcher invokes the function with (the
// outbox's TargetCall).
type Call struct {
	OperationID string         `json:"operation_id"`
	Kind        string         `json:"kind"`
	Scope       string         `json:"scope,omitempty"`
	Source      string         `json:"source,omitempty"`
	Subject     string         `json:"subject"`
	Version     string         `json:"version,omitempty"`
	Payload     map[string]any `json:"payload,omitempty"`
}

// Answer is the function's answer, as the dispatcher reads it.
type Answer struct {
	Status   string `json:"status"` // applied or rejected
	Replayed bool   `json:"replayed,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Shipment is one order shipped, as the function records it.
type Shipment struct {
	OperationID string    `json:"operation_id"`
	Order       string    `json:"order"`
	Scope       string    `json:"scope,omitempty"`
	Version     string    `json:"version,omitempty"`
	At          time.Time `json:"at"`
}

// ShipmentsFile is the file, in the function's state directory, that
// holds one Shipment per line.
const ShipmentsFile = "shipments.jsonl"

// Service ships orders once per operation id.
type Service struct {
	// Dir is where ShipmentsFile is kept; "" keeps the shipments in
	// memory only (one execution environment's).
	Dir string
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	shipped map[string]bool // loaded from Dir on first use
}

// New returns the service keeping its record in dir.
func New(dir string) *Service { return &Service{Dir: dir} }

// Handle performs one call: it ships the order the call names unless its
// operation id was shipped already.
func (s *Service) Handle(_ context.Context, c Call) (Answer, error) {
	switch {
	case c.Kind != Kind:
		return Answer{Status: "rejected", Reason: fmt.Sprintf("this function ships orders (%s), not %q", Kind, c.Kind)}, nil
	case c.OperationID == "" || c.Subject == "":
		return Answer{Status: "rejected", Reason: "a call names its operation_id and its subject (the order)"}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(); err != nil {
		return Answer{}, err // an error: the dispatcher retries, nothing was shipped
	}
	if s.shipped[c.OperationID] {
		return Answer{Status: "applied", Replayed: true}, nil
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	sh := Shipment{OperationID: c.OperationID, Order: c.Subject, Scope: c.Scope, Version: c.Version, At: now().UTC()}
	if err := s.record(sh); err != nil {
		return Answer{}, err
	}
	s.shipped[c.OperationID] = true
	return Answer{Status: "applied"}, nil
}

// load reads the record once.
func (s *Service) load() error {
	if s.shipped != nil {
		return nil
	}
	shipped := map[string]bool{}
	if s.Dir != "" {
		all, err := Shipments(s.Dir)
		if err != nil {
			return err
		}
		for _, sh := range all {
			shipped[sh.OperationID] = true
		}
	}
	s.shipped = shipped
	return nil
}

// record appends a shipment to the file (synced before the answer).
func (s *Service) record(sh Shipment) error {
	if s.Dir == "" {
		return nil
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, ShipmentsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Shipments reads the record kept in dir: every shipment, in order.
func Shipments(dir string) ([]Shipment, error) {
	f, err := os.Open(filepath.Join(dir, ShipmentsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Shipment
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var sh Shipment
		if err := json.Unmarshal(sc.Bytes(), &sh); err != nil {
			return nil, fmt.Errorf("%s: %v", ShipmentsFile, err)
		}
		out = append(out, sh)
	}
	return out, sc.Err()
}
