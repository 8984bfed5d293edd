package provider

// Placeholders replaced by the Standard Webhooks, Shopify, GitHub, Quiltt
// and generic HMAC verifiers.

func newStandardWebhooks(map[string]string) (Verifier, error) { return nil, ErrUnknownKind }
func newShopify(map[string]string) (Verifier, error)          { return nil, ErrUnknownKind }
func newGitHub(map[string]string) (Verifier, error)           { return nil, ErrUnknownKind }
func newQuiltt(map[string]string) (Verifier, error)           { return nil, ErrUnknownKind }
func newHMAC(map[string]string) (Verifier, error)             { return nil, ErrUnknownKind }
