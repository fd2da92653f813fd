// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3 release pinned in
// go.mod so the control plane needs nothing but Go modules.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
