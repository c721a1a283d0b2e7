"""gguf_io.py — the little GGUF the training recipe needs: read metadata and F32/F16/BF16 tensors
(export helper, vocabulary source), write a vocabulary-only file (tokenizing the corpus with deltallm).

Not a general GGUF library: the product's reader and writer are src/gguf/ (C). numpy only."""
import struct

import numpy as np

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
_SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
           T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


class Gguf:
    def __init__(self, path):
        self.buf = open(path, "rb").read()
        self.pos = 0
        magic, version = struct.unpack_from("<4sI", self.buf, 0)
        if magic != b"GGUF" or version != 3:
            raise ValueError(f"{path}: not a GGUF v3 file")
        self.pos = 8
        n_tensors, n_kv = self._u("<QQ")
        self.kv = {}
        self.kv_types = {}
        for _ in range(n_kv):
            key = self._str()
            (t,) = self._u("<I")
            self.kv_types[key] = t
            self.kv[key] = self._val(t)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            (nd,) = self._u("<I")
            ne = self._u("<" + "Q" * nd)
            t, off = self._u("<IQ")
            self.tensors[name] = (list(ne), t, off)
        align = int(self.kv.get("general.alignment", 32))
        self.data = (self.pos + align - 1) // align * align

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        (n,) = self._u("<Q")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "surrogateescape")

    def _val(self, t):
        if t == T_STR:
            return self._str()
        if t == T_ARR:
            et, n = self._u("<IQ")
            if et in _SCALAR and et != T_BOOL:
                a = np.frombuffer(self.buf, dtype=np.dtype(_SCALAR[et]), count=n, offset=self.pos)
                self.pos += a.nbytes
                return a.tolist()
            return [self._val(et) for _ in range(n)]
        return self._u(_SCALAR[t])[0]

    def tensor(self, name):
        """The tensor as a numpy array in PyTorch order (ggml ne reversed)."""
        ne, t, off = self.tensors[name]
        n = int(np.prod(ne))
        start = self.data + off
        if t == GGML_F32:
            a = np.frombuffer(self.buf, np.float32, n, start)
        elif t == GGML_F16:
            a = np.frombuffer(self.buf, np.float16, n, start).astype(np.float32)
        elif t == GGML_BF16:
            a = (np.frombuffer(self.buf, np.uint16, n, start).astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: ggml type {t} is not F32/F16/BF16 (export needs an unquantized file)")
        return a.reshape(list(reversed(ne)))

    def raw(self, name):
        ne, t, off = self.tensors[name]
        return t, ne


def _w_str(out, s):
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    out += struct.pack("<Q", len(b)) + b


def write_kv_only(path, kvs):
    """kvs: list of (key, type, value); arrays as (key, T_ARR, (elem_type, list))."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
    for key, t, v in kvs:
        _w_str(out, key)
        out += struct.pack("<I", t)
        if t == T_STR:
            _w_str(out, v)
        elif t == T_ARR:
            et, items = v
            out += struct.pack("<IQ", et, len(items))
            if et == T_STR:
                for s in items:
                    _w_str(out, s)
            else:
                out += np.asarray(items, dtype=np.dtype(_SCALAR[et])).tobytes()
        else:
            out += struct.pack(_SCALAR[t], v)
    with open(path, "wb") as f:
        f.write(out)
