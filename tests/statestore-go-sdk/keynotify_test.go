// The official Go state store SDK (github.com/Azure/iot-operations-sdks/go/services) observing
// a key on `mqstate serve`, written against the SDK's public API for this project (none of the
// SDK's own test code). The SDK's client never subscribes to its notification topic (see
// docs/protocol.md section 6.1), so whether a notification arrives is what the server decides:
// MQSTATE_EXPECT_NOTIFY=1 (the default server) expects the SET and DELETE notifications,
// MQSTATE_EXPECT_NOTIFY=0 (`mqstate serve --no-implicit-notify`) expects none.
// MQSTATE_PORT is the server's MQTT port on 127.0.0.1. Run by scripts/test-go-sdk.
package statestoregosdk

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/iot-operations-sdks/go/mqtt"
	"github.com/Azure/iot-operations-sdks/go/protocol"
	"github.com/Azure/iot-operations-sdks/go/services/statestore"
	"github.com/google/uuid"
)

// How long an expected notification may take, and how long an unexpected one is waited for.
const (
	wait  = 10 * time.Second
	quiet = 2 * time.Second
)

func settings(t *testing.T) (uint16, bool) {
	port, err := strconv.ParseUint(os.Getenv("MQSTATE_PORT"), 10, 16)
	if err != nil {
		t.Skip("MQSTATE_PORT is not set: run scripts/test-go-sdk")
	}
	return uint16(port), os.Getenv("MQSTATE_EXPECT_NOTIFY") != "0"
}

func connect(ctx context.Context, t *testing.T, app *protocol.Application, port uint16) *statestore.Client[string, string] {
	session, err := mqtt.NewSessionClient(mqtt.RandomClientID(), mqtt.TCPConnection("127.0.0.1", port))
	if err != nil {
		t.Fatalf("session client: %v", err)
	}
	client, err := statestore.New[string, string](app, session)
	if err != nil {
		t.Fatalf("state store client: %v", err)
	}
	if err := session.Start(); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		client.Close()
		_ = session.Stop()
	})
	return client
}

// next returns the next notification, or nil after `within`.
func next(ch <-chan statestore.Notify[string, string], within time.Duration) *statestore.Notify[string, string] {
	select {
	case n := <-ch:
		return &n
	case <-time.After(within):
		return nil
	}
}

func TestObserveWithoutSubscribing(t *testing.T) {
	port, expect := settings(t)
	ctx := context.Background()
	app, err := protocol.NewApplication()
	if err != nil {
		t.Fatalf("application: %v", err)
	}
	client := connect(ctx, t, app, port)
	key := "go-sdk-" + uuid.NewString()
	ch, done := client.Notify(key)
	defer done()
	if err := client.KeyNotify(ctx, key); err != nil {
		t.Fatalf("KEYNOTIFY: %v", err)
	}
	if _, err := client.Set(ctx, key, "v1"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if !expect {
		if n := next(ch, quiet); n != nil {
			t.Fatalf("a notification without a subscription, with --no-implicit-notify: %+v", *n)
		}
		return
	}
	n := next(ch, wait)
	if n == nil {
		t.Fatalf("no SET notification within %v", wait)
	}
	if n.Operation != "SET" || n.Value != "v1" || n.Version.IsZero() {
		t.Fatalf("SET notification: %+v", *n)
	}
	if _, err := client.Del(ctx, key); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n = next(ch, wait)
	if n == nil || n.Operation != "DELETE" {
		t.Fatalf("DELETE notification: %+v", n)
	}
	if err := client.KeyNotifyStop(ctx, key); err != nil {
		t.Fatalf("KEYNOTIFY STOP: %v", err)
	}
	if _, err := client.Set(ctx, key, "v2"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if n := next(ch, quiet); n != nil {
		t.Fatalf("a notification after STOP: %+v", *n)
	}
}
