// Command otlp-receiver runs the OpenTelemetry Collector's own OTLP receiver
// (go.opentelemetry.io/collector/receiver/otlpreceiver) with OTLP/HTTP only, on the endpoint
// given by -http, and writes every span it receives as one JSON line to stdout, for the
// tests of crates/brisk-testkit (src/servers/otlp.rs starts it).
//
// Stdout: first {"listening":"HOST:PORT"} once the receiver listens, then one line per span
// with trace_id, span_id, parent_span_id, name, kind, service, status, attributes,
// start_unix_nano and end_unix_nano. Errors and the receiver's log go to stderr. SIGTERM or
// SIGINT shuts the receiver down and exits 0; a failure to start exits 1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
)

// spanLine is one received span as written to stdout.
type spanLine struct {
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id"`
	Name          string         `json:"name"`
	Kind          string         `json:"kind"`
	Service       string         `json:"service"`
	Status        string         `json:"status"`
	Attributes    map[string]any `json:"attributes"`
	StartUnixNano uint64         `json:"start_unix_nano"`
	EndUnixNano   uint64         `json:"end_unix_nano"`
}

// output serialises the lines written to stdout: the receiver may call the consumer from
// several requests at once.
type output struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// line writes v as one JSON line and flushes it.
func (o *output) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return o.w.Flush()
}

// consume writes every span of td to out.
func consume(out *output, td ptrace.Traces) error {
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			spans := rs.ScopeSpans().At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				err := out.line(spanLine{
					TraceID:       s.TraceID().String(),
					SpanID:        s.SpanID().String(),
					ParentSpanID:  s.ParentSpanID().String(),
					Name:          s.Name(),
					Kind:          s.Kind().String(),
					Service:       service,
					Status:        s.Status().Code().String(),
					Attributes:    s.Attributes().AsRaw(),
					StartUnixNano: uint64(s.StartTimestamp()),
					EndUnixNano:   uint64(s.EndTimestamp()),
				})
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func run() error {
	flags := flag.NewFlagSet("otlp-receiver", flag.ContinueOnError)
	endpoint := flags.String("http", "127.0.0.1:4318", "OTLP/HTTP listen address (host:port)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", flags.Args())
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	out := &output{w: bufio.NewWriter(os.Stdout)}
	traces, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		return consume(out, td)
	})
	if err != nil {
		return fmt.Errorf("traces consumer: %w", err)
	}

	factory := otlpreceiver.NewFactory()
	cfg := factory.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	httpCfg := cfg.Protocols.HTTP.GetOrInsertDefault()
	httpCfg.ServerConfig.NetAddr.Endpoint = *endpoint

	set := receivertest.NewNopSettings(factory.Type())
	logger, err := zap.NewProduction() // JSON on stderr, info and above
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = logger.Sync() }()
	set.Logger = logger

	recv, err := factory.CreateTraces(ctx, set, cfg, traces)
	if err != nil {
		return fmt.Errorf("create OTLP receiver: %w", err)
	}
	if err := recv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return fmt.Errorf("start OTLP receiver on %s: %w", *endpoint, err)
	}
	if err := out.line(map[string]string{"listening": *endpoint}); err != nil {
		_ = recv.Shutdown(context.Background())
		return fmt.Errorf("stdout: %w", err)
	}

	<-ctx.Done()
	if err := recv.Shutdown(context.Background()); err != nil {
		return fmt.Errorf("shut down OTLP receiver: %w", err)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "otlp-receiver:", err)
		os.Exit(1)
	}
}
