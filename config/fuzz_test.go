package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/berthsched/berth/config"
)

// FuzzRead: any input gives a File or an error, never a panic; a File
// that reads without error writes and reads back equal, in YAML and JSON.
func FuzzRead(f *testing.F) {
	ps, _ := filepath.Glob("../examples/config/*.yaml")
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"cluster":{"nodes":[{"name":"n","gpus":1}]},"queues":{"halfLife":"0s","queues":[{"name":"q"}]},"engine":{}}`))
	f.Add([]byte("queues: {queues: [{name: q, quota: {gpu: {nominal: 1.5, borrowingLimit: unlimited, lendingLimit: 0}}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := config.Read(data)
		if err != nil {
			return
		}
		for _, enc := range []func(*config.File) ([]byte, error){(*config.File).YAML, (*config.File).JSON} {
			b, err := enc(file)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			g, err := config.Read(b)
			if err != nil {
				t.Fatalf("read back: %v\n%s", err, b)
			}
			if !file.Equal(g) {
				t.Fatalf("round trip differs:\n%s", b)
			}
		}
	})
}
