// Command etcd is upstream etcd, built from its Go module at the version pinned
// in this module's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
