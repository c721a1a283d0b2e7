"""tensor_diff.py A.gguf B.gguf — which metadata entries and tensors (name, type, shape, bytes) differ."""
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/train")
import gguf_io  # noqa: E402

a, b = gguf_io.Gguf(sys.argv[1]), gguf_io.Gguf(sys.argv[2])
ka, kb = list(a.kv), list(b.kv)
if ka != kb:
    print("  metadata keys/order differ:\n    A:", ka, "\n    B:", kb)
for k in ka:
    if k in b.kv and (a.kv[k] != b.kv[k] or a.kv_types[k] != b.kv_types[k]):
        print(f"  metadata {k}: {str(a.kv[k])[:80]} ({a.kv_types[k]}) vs {str(b.kv[k])[:80]} ({b.kv_types[k]})")
if list(a.tensors) != list(b.tensors):
    print("  tensor order differs")
bad = 0
for n, (ne, t, off) in a.tensors.items():
    if n not in b.tensors:
        print(f"  {n}: missing in B")
        continue
    ne2, t2, off2 = b.tensors[n]
    nb = (list(a.tensors.values()) + [None])
    if ne != ne2 or t != t2:
        print(f"  {n}: type/shape {t} {ne} vs {t2} {ne2}")
        bad += 1
        continue
    # bytes: up to the next tensor's offset (or the end)
    def span(g, name):
        offs = sorted(o for _, _, o in g.tensors.values())
        o = g.tensors[name][2]
        i = offs.index(o)
        end = offs[i + 1] if i + 1 < len(offs) else len(g.buf) - g.data
        return g.buf[g.data + o:g.data + end]
    x, y = span(a, n), span(b, n)
    if x.rstrip(b"\0") != y.rstrip(b"\0"):
        nd = sum(1 for i in range(min(len(x), len(y))) if x[i] != y[i])
        print(f"  {n}: type {t}: {nd} of {len(x)} bytes differ")
        bad += 1
print(f"  {bad} tensors differ")
