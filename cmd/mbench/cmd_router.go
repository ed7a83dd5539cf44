package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "router",
			Usage:     "a load-only router: round-robins OpenAI requests over the given instances (streaming passes through)",
			ArgsUsage: "TARGET_URL...",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "addr", Value: "127.0.0.1:9090", Usage: "listen address"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() == 0 {
					return usageError{errors.New("router: give at least one target URL")}
				}
				var targets []*url.URL
				for _, a := range c.Args().Slice() {
					u, err := url.Parse(a)
					if err != nil || u.Scheme == "" || u.Host == "" {
						return usageError{fmt.Errorf("router: target %q is not an http URL", a)}
					}
					targets = append(targets, u)
				}
				return serveRouter(c.Context, c.String("addr"), targets, c.App.ErrWriter)
			},
		}
	})
}

// serveRouter proxies every request to the next target in turn; /health is
// 200 only when every target's /health is.
func serveRouter(ctx context.Context, addr string, targets []*url.URL, logw interface{ Write([]byte) (int, error) }) error {
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			t := targets[next.Add(1)%uint64(len(targets))]
			r.SetURL(t)
		},
		FlushInterval: -1, // stream SSE chunks as they come
	}
	client := &http.Client{Timeout: 2 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		for _, t := range targets {
			resp, err := client.Get(t.JoinPath("/health").String())
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				http.Error(w, t.String()+" not healthy", http.StatusServiceUnavailable)
				return
			}
		}
	})
	mux.Handle("/", proxy)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("router: listen on %s: %w", addr, err)
	}
	fmt.Fprintf(logw, "router: %s → %d targets\n", ln.Addr(), len(targets))
	srv := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("router: %w", err)
	}
	return nil
}
