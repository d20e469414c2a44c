package yarnsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Start serves the REST API on addr ("127.0.0.1:0" picks a free port) and
// returns the RM's base URL, for the demo and for tests that want a real
// listener of their own. Close stops it.
func (s *Sim) Start(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("yarnsim: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.srv != nil {
		s.mu.Unlock()
		l.Close()
		return "", errors.New("yarnsim: already started")
	}
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// Close stops the server Start started, waiting for requests in flight
// until ctx ends.
func (s *Sim) Close(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("yarnsim: shut down: %w", err)
	}
	return nil
}
