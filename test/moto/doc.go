// Package moto runs moto (https://github.com/getmoto/moto) in server mode
// for integration tests of the AWS provider. Install runs install.sh, which
// puts a pinned moto[server] into a virtualenv under
// ${GPUBROKER_CACHE:-$HOME/.cache/gpubroker}; Start runs moto_server on a
// free loopback port and waits until it answers.
package moto
