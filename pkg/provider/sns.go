package provider

// Placeholder replaced by the Amazon SNS (SES notifications) verifier.

func newSNS(map[string]string) (Verifier, error) { return nil, ErrUnknownKind }
