// Command echo serves the e2e echo upstream (package echo) on -listen, by default :8080. The
// docker compose setup runs it as the "upstream" service.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/echo"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	srv := &http.Server{Addr: *listen, Handler: echo.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("echo: serving on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
