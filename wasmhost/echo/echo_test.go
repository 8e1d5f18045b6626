package echo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/a/b?status=503&x=1", strings.NewReader("hello"))
	req.Header.Add("X-Thing", "1")
	req.Header.Add("X-Thing", "2")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 503 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content-type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var rep Reply
	if err := json.NewDecoder(res.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.Upstream != "echo" || rep.Method != "POST" || rep.Path != "/a/b?status=503&x=1" ||
		rep.Headers["x-thing"] != "1,2" || rep.BodyBytes != 5 {
		t.Fatalf("reply %+v", rep)
	}
}
