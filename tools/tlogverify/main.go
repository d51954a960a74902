// Command tlogverify checks a runtrail transparency log with Go's own sumdb packages, sharing
// no code with runtrail: the signed checkpoint (golang.org/x/mod/sumdb/note), every C2SP tile
// against the checkpoint's root, every entry against its leaf hash, and the inclusion and
// consistency proofs it is asked for (golang.org/x/mod/sumdb/tlog). It prints what it found
// as JSON and exits 1 at the first thing that does not verify.
//
//	tlogverify -log DIR|URL -vkey NAME+ID+KEY [-origin O] [-old CHECKPOINT] [-leaf N]
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8

type source struct{ base string }

// read returns one object of the log: a file under a folder, or a GET under a URL.
func (s source) read(path string) ([]byte, error) {
	if strings.HasPrefix(s.base, "http://") || strings.HasPrefix(s.base, "https://") {
		resp, err := http.Get(strings.TrimSuffix(s.base, "/") + "/" + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	return os.ReadFile(filepath.Join(s.base, filepath.FromSlash(path)))
}

// c2spPath is a tile's C2SP tlog-tiles path: Go's sumdb path without the height element.
func c2spPath(t tlog.Tile) string {
	return strings.Replace(t.Path(), fmt.Sprintf("tile/%d/", height), "tile/", 1)
}

type tiles struct{ src source }

func (r tiles) Height() int { return height }

func (r tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		data, err := r.src.read(c2spPath(t))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (r tiles) SaveTiles([]tlog.Tile, [][]byte) {}

type checkpoint struct {
	origin string
	tree   tlog.Tree
}

func openCheckpoint(msg []byte, verifier note.Verifier, origin string) (checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		return checkpoint{}, fmt.Errorf("checkpoint signature: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) < 3 {
		return checkpoint{}, fmt.Errorf("checkpoint has %d lines", len(lines))
	}
	if origin != "" && lines[0] != origin {
		return checkpoint{}, fmt.Errorf("checkpoint origin %q is not %q", lines[0], origin)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return checkpoint{}, fmt.Errorf("checkpoint size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return checkpoint{}, fmt.Errorf("checkpoint root %q", lines[2])
	}
	var h tlog.Hash
	copy(h[:], root)
	return checkpoint{lines[0], tlog.Tree{N: size, Hash: h}}, nil
}

// checkEntries reads every entry bundle and checks each entry's record hash against the
// (authenticated) level-0 hash at its index.
func checkEntries(src source, size int64, hr tlog.HashReader) error {
	for start := int64(0); start < size; start += 1 << height {
		width := min(size-start, 1<<height)
		t := tlog.Tile{H: height, L: -1, N: start >> height, W: int(width)}
		path := strings.Replace(c2spPath(t), "tile/data/", "tile/entries/", 1)
		data, err := src.read(path)
		if err != nil {
			return err
		}
		indexes := make([]int64, width)
		for i := range indexes {
			indexes[i] = tlog.StoredHashIndex(0, start+int64(i))
		}
		hashes, err := hr.ReadHashes(indexes)
		if err != nil {
			return err
		}
		for i := int64(0); i < width; i++ {
			if len(data) < 2 {
				return fmt.Errorf("%s: entry %d missing", path, start+i)
			}
			n := int(binary.BigEndian.Uint16(data))
			if len(data) < 2+n {
				return fmt.Errorf("%s: entry %d truncated", path, start+i)
			}
			if tlog.RecordHash(data[2:2+n]) != hashes[i] {
				return fmt.Errorf("%s: entry %d does not match its leaf hash", path, start+i)
			}
			data = data[2+n:]
		}
		if len(data) != 0 {
			return fmt.Errorf("%s: %d bytes after the last entry", path, len(data))
		}
	}
	return nil
}

func b64(hashes []tlog.Hash) []string {
	out := make([]string, len(hashes))
	for i, h := range hashes {
		out[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	return out
}

func run() (map[string]any, error) {
	logFlag := flag.String("log", "", "the log: a folder or an http(s) URL")
	vkey := flag.String("vkey", "", "verifier key of the log: name+id+key")
	origin := flag.String("origin", "", "expected origin (default: any)")
	old := flag.String("old", "", "an older signed checkpoint: prove the log consistent with it")
	leaf := flag.Int64("leaf", -1, "prove this leaf's inclusion")
	flag.Parse()
	verifier, err := note.NewVerifier(*vkey)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	src := source{*logFlag}
	msg, err := src.read("checkpoint")
	if err != nil {
		return nil, err
	}
	cp, err := openCheckpoint(msg, verifier, *origin)
	if err != nil {
		return nil, err
	}
	hr := tlog.TileHashReader(cp.tree, tiles{src})
	root, err := tlog.TreeHash(cp.tree.N, hr)
	if err != nil {
		return nil, fmt.Errorf("tree hash from the tiles: %w", err)
	}
	if root != cp.tree.Hash {
		return nil, fmt.Errorf("the tiles hash to %v, the checkpoint says %v", root, cp.tree.Hash)
	}
	if err := checkEntries(src, cp.tree.N, hr); err != nil {
		return nil, err
	}
	out := map[string]any{
		"origin": cp.origin, "size": cp.tree.N,
		"root": base64.StdEncoding.EncodeToString(root[:]), "entries": cp.tree.N,
	}
	if *old != "" {
		oldMsg, err := os.ReadFile(*old)
		if err != nil {
			return nil, err
		}
		oldCp, err := openCheckpoint(oldMsg, verifier, cp.origin)
		if err != nil {
			return nil, fmt.Errorf("old %w", err)
		}
		if oldCp.tree.N > cp.tree.N {
			return nil, fmt.Errorf("rollback: the log has %d leaves, an older checkpoint %d", cp.tree.N, oldCp.tree.N)
		}
		proof, err := tlog.ProveTree(cp.tree.N, oldCp.tree.N, hr)
		if err != nil {
			return nil, err
		}
		if err := tlog.CheckTree(proof, cp.tree.N, cp.tree.Hash, oldCp.tree.N, oldCp.tree.Hash); err != nil {
			return nil, fmt.Errorf("fork: the log of %d is not an extension of the old checkpoint of %d: %w", cp.tree.N, oldCp.tree.N, err)
		}
		out["consistency"] = map[string]any{"oldSize": oldCp.tree.N, "proof": b64(proof)}
	}
	if *leaf >= 0 {
		proof, err := tlog.ProveRecord(cp.tree.N, *leaf, hr)
		if err != nil {
			return nil, err
		}
		hashes, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, *leaf)})
		if err != nil {
			return nil, err
		}
		if err := tlog.CheckRecord(proof, cp.tree.N, cp.tree.Hash, *leaf, hashes[0]); err != nil {
			return nil, err
		}
		out["inclusion"] = map[string]any{"leafIndex": *leaf, "proof": b64(proof)}
	}
	return out, nil
}

func main() {
	out, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlogverify:", err)
		os.Exit(1)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
	os.Stdout.Write(buf.Bytes())
}
