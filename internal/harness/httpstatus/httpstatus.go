// Package httpstatus remembers the status an http.Handler answered, for
// the harness's recording servers and proxies.
package httpstatus

import "net/http"

// Writer passes everything to ResponseWriter and keeps the first status
// written: WriteHeader's, or 200 for a Write without one. Code is 0 while
// nothing was written.
type Writer struct {
	http.ResponseWriter
	Code int
}

// WriteHeader records code and writes it.
func (w *Writer) WriteHeader(code int) {
	if w.Code == 0 {
		w.Code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and writes b.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Code == 0 {
		w.Code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
