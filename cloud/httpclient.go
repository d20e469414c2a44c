package cloud

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// httpClient wraps the SDK's HTTP client with one fix.
//
// IMPORTANT: smithy-go wraps a request body in a reader whose WriteTo
// returns io.EOF once the body is closed, and the SDK closes the body as
// soon as Do returns (when the answer's headers arrive). If the answer
// comes before net/http has finished its own final read of the body (fast
// endpoints: loopback simulators, a VPC endpoint on a quiet day), net/http's
// body copy sees that io.EOF as a write error and closes the connection
// under the response being read: "use of closed network connection" and a
// retry. Hiding WriteTo makes net/http use Read, which reports a closed
// body as a clean end of stream.
type httpClient struct{ inner aws.HTTPClient }

// Do sends req with its body stripped of WriteTo.
func (c httpClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = readOnlyBody{req.Body}
	}
	return c.inner.Do(req)
}

// readOnlyBody exposes only Read and Close.
type readOnlyBody struct{ rc io.ReadCloser }

func (b readOnlyBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b readOnlyBody) Close() error               { return b.rc.Close() }
