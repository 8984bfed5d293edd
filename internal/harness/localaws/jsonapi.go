package localaws

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// jsonAPI is the wire protocol shared by the local EventBridge (AWS JSON
// 1.1) and Step Functions (AWS JSON 1.0) endpoints: POST / with the
// operation in X-Amz-Target ("<prefix>.<Operation>"), the input as a JSON
// object, and an error as a 4xx/5xx answer naming its code in
// X-Amzn-ErrorType and in the body's __type, with a message.
type jsonAPI struct {
	prefix      string // "AWSEvents", "AWSStepFunctions"
	contentType string // "application/x-amz-json-1.1", "application/x-amz-json-1.0"
	maxBody     int64

	mu     sync.Mutex
	inject []injected // request failures armed by tests, first first
}

// injected is a request failure a test arms: the next request of Op (any
// operation when empty) is answered Status with error Code, and not
// acted on.
type injected struct {
	Op     string
	Status int
	Code   string
}

// apiError is an error answer.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func validation(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "ValidationException", Message: fmt.Sprintf(format, args...)}
}

// serve decodes one request and calls handle with its operation and
// body, writing the answer or the error.
func (j *jsonAPI) serve(w http.ResponseWriter, r *http.Request, handle func(op string, body []byte) (any, *apiError)) {
	fail := func(e *apiError) {
		w.Header().Set("Content-Type", j.contentType)
		w.Header().Set("X-Amzn-ErrorType", e.Code)
		w.WriteHeader(e.Status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.Code, "message": e.Message})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		fail(&apiError{Status: http.StatusNotFound, Code: "UnknownOperationException", Message: r.Method + " " + r.URL.Path})
		return
	}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), j.prefix+".")
	if !ok || op == "" {
		fail(&apiError{Status: http.StatusBadRequest, Code: "UnknownOperationException", Message: "X-Amz-Target " + r.Header.Get("X-Amz-Target")})
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, j.contentType) {
		fail(&apiError{Status: http.StatusBadRequest, Code: "SerializationException", Message: "Content-Type " + ct + ", want " + j.contentType})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, j.maxBody+1))
	if err != nil {
		fail(&apiError{Status: http.StatusBadRequest, Code: "SerializationException", Message: err.Error()})
		return
	}
	if int64(len(body)) > j.maxBody {
		fail(&apiError{Status: http.StatusRequestEntityTooLarge, Code: "RequestEntityTooLargeException", Message: fmt.Sprintf("request over %d bytes", j.maxBody)})
		return
	}
	if e := j.armed(op); e != nil {
		fail(e)
		return
	}
	out, e := handle(op, body)
	if e != nil {
		fail(e)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		fail(&apiError{Status: http.StatusInternalServerError, Code: "InternalFailure", Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", j.contentType)
	_, _ = w.Write(b)
}

// FailNext arms request failures: the next request of op ("" for any)
// is answered status with error code, without being acted on.
func (j *jsonAPI) failNext(op string, status int, code string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.inject = append(j.inject, injected{Op: op, Status: status, Code: code})
}

func (j *jsonAPI) armed(op string) *apiError {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, in := range j.inject {
		if in.Op == "" || in.Op == op {
			j.inject = append(j.inject[:i], j.inject[i+1:]...)
			return &apiError{Status: in.Status, Code: in.Code, Message: "injected by the test"}
		}
	}
	return nil
}

// decodeStrict decodes a JSON object into v, refusing members v does not
// have, as the services refuse unknown input members.
func decodeStrict(body []byte, v any) *apiError {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &apiError{Status: http.StatusBadRequest, Code: "SerializationException", Message: err.Error()}
	}
	return nil
}

// newID returns a random id shaped as a UUID.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
