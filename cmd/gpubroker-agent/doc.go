// Command gpubroker-agent runs on every GPU node. It reads the node's GPUs
// through NVML (utilisation, memory, temperature, power, uncorrectable ECC
// errors, XID events, MIG mode and instances) and pushes a small report to
// the broker's API at an interval:
//
//	gpubroker-agent --broker http://gpubroker.gpubroker.svc \
//	    --token-file /var/run/secrets/gpubroker/token --node "$NODE_NAME"
//
// Against a broker with api.tls.client_ca_file, a client certificate naming
// the node replaces the token (and is reloaded when its files change):
//
//	gpubroker-agent --broker https://gpubroker.gpubroker.svc --node "$NODE_NAME" \
//	    --cert-file tls.crt --key-file tls.key --ca-file ca.crt
//
// The broker keeps each node's latest report; it uses GPU utilisation in its
// scale-down rule (GPU use decides, not CPU) and replaces nodes whose GPUs
// report XID or ECC failures. When the broker is away the agent backs off
// with jitter and sends a fresh sample when it is back: the latest wins.
//
// Without the NVIDIA driver (libnvidia-ml.so.1) the agent prints one line
// saying so and exits with status 1, unless --allow-no-gpu is given; then it
// reports the node without GPUs. Bad flags exit with status 2.
package main
