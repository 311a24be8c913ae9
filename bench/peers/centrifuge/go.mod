module brisk-bench/peer-centrifuge

go 1.26.0

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/centrifugal/centrifuge v0.40.1 // indirect
	github.com/centrifugal/fdelta v0.0.3 // indirect
	github.com/centrifugal/protocol v0.23.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.1 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/quagmt/udecimal v1.10.1 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
