// The Centrifuge peer of the cluster lab (issue 17): a WebSocket server built on
// github.com/centrifugal/centrifuge (the library Centrifugo is made of; Centrifugo itself is
// not on the Go module proxy here) with its Redis broker, so that instances on one Redis
// share channels. Anonymous clients connect, subscribe to any channel and publish to it; a
// publication reaches every subscriber on every instance.
//
//	peer-centrifuge -addr 127.0.0.1:8000 -redis 127.0.0.1:6379
//
// Clients speak Centrifuge's JSON protocol on /connection/websocket.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"

	"github.com/centrifugal/centrifuge"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "address to listen on")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis server (host:port)")
	flag.Parse()

	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelError})
	if err != nil {
		log.Fatal(err)
	}
	node.OnConnecting(func(ctx context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: ""}}, nil
	})
	node.OnConnect(func(client *centrifuge.Client) {
		client.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{}, nil)
		})
		client.OnPublish(func(e centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
			cb(centrifuge.PublishReply{}, nil)
		})
	})
	shard, err := centrifuge.NewRedisShard(node, centrifuge.RedisShardConfig{Address: *redisAddr})
	if err != nil {
		log.Fatal(err)
	}
	broker, err := centrifuge.NewRedisBroker(node, centrifuge.RedisBrokerConfig{Shards: []*centrifuge.RedisShard{shard}})
	if err != nil {
		log.Fatal(err)
	}
	node.SetBroker(broker)
	presence, err := centrifuge.NewRedisPresenceManager(node, centrifuge.RedisPresenceManagerConfig{Shards: []*centrifuge.RedisShard{shard}})
	if err != nil {
		log.Fatal(err)
	}
	node.SetPresenceManager(presence)
	if err := node.Run(); err != nil {
		log.Fatal(err)
	}
	ws := centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{
		CheckOrigin: func(r *http.Request) bool { return true },
	})
	http.Handle("/connection/websocket", ws)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
