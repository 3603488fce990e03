"""An independent verifier of Writ's sealed audit records (docs/audit.md).

Nothing here comes from Writ: SHA-256 is Python's hashlib, the canonical
JSON (RFC 8785) is the small implementation below, the Merkle tree follows
RFC 9162 section 2.1 and is checked against the Certificate Transparency
reference vectors first, and Ed25519 is the `cryptography` package's.

Usage: verify_seals.py BASE_URL ADMIN_TOKEN CALL_ID...
       verify_seals.py --proof-file FILE   (a proof as the route returns it,
                                           with "keys": the keys route's list)
       verify_seals.py --archive FILE      (a `writ audit archive` file)

For each call it fetches the inclusion proof
(GET /api/v1/admin/audit/calls/{id}/proof) and the signing keys
(GET /api/v1/audit/keys), and checks: the leaf hash is SHA-256(0x00 ||
JCS(leaf)); the audit path leads from it to the seal's merkle_root; the
seal_hash is SHA-256(JCS(the seal's fields)); the signature is the listed
key's Ed25519 signature of the raw seal_hash. Seals met more than once must
agree, and a seal whose predecessor was met must chain to it. Prints "ok"
and exits 0, or names what failed and exits 1.

With --archive it reads the whole archive (zstd, by the `zstandard`
package; JSON Lines) and checks: a header first, the keys listed by their
ids, each seal's records in its call_ids order, their leaves making its
merkle_root, its seal_hash and signature, each seal chaining to the one
before, and the end line with the header's counts (a file cut short fails).
"""

import hashlib
import json
import sys
import urllib.request

import zstandard

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def jcs(value):
    """RFC 8785 canonical JSON of the values Writ's seals hold: objects,
    arrays, strings, integers, booleans and null."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # JSON.stringify's escaping: only the quote, the backslash and
        # control characters; \b \f \n \r \t short, others \u00xx.
        out = ['"']
        for ch in value:
            code = ord(ch)
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif ch in "\b\f\n\r\t":
                out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
            elif code < 0x20:
                out.append("\\u%04x" % code)
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(jcs(k) + ":" + jcs(value[k]) for k in keys) + "}"
    raise ValueError("not a value a seal holds: %r" % (value,))


def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves):
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def root_from_path(leaf, index, size, path):
    """RFC 9162 section 2.1.3.2: the root an audit path leads to, or None."""
    if index >= size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def check_vectors():
    """The Certificate Transparency reference tree (RFC 6962 test data)."""
    data = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
            "606162636465666768696a6b6c6d6e6f"]
    leaves = [leaf_hash(bytes.fromhex(d)) for d in data]
    roots = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
    for n, root in enumerate(roots):
        assert merkle_root(leaves[:n]).hex() == root, "RFC 9162 vector: root of %d leaves" % n
    paths = [
        (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
        (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
        (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    ]
    for index, size, path in paths:
        got = root_from_path(leaves[index], index, size, [bytes.fromhex(p) for p in path])
        assert got == merkle_root(leaves[:size]), "RFC 9162 vector: path of leaf %d of %d" % (index, size)


SEAL_FIELDS = ["seq", "first", "last", "count", "merkle_root", "prev_seal_hash", "sealed_at", "key_id"]


def check_proof(proof, keys, seals):
    """Checks one proof; returns what failed, or None."""
    call = proof["call_id"]
    leaf = leaf_hash(jcs(proof["leaf"]).encode("utf-8"))
    if leaf.hex() != proof["leaf_hash"]:
        return "call %s: leaf_hash is not SHA-256(0x00 || JCS(leaf))" % call
    if proof["leaf"].get("call_id") != call:
        return "call %s: the leaf is another call's" % call
    seal = proof["seal"]
    path = [bytes.fromhex(p) for p in proof["audit_path"]]
    if root_from_path(leaf, proof["index"], seal["count"], path) != bytes.fromhex(seal["merkle_root"]):
        return "call %s: the audit path does not lead to seal %s's merkle_root" % (call, seal["seq"])
    fields = {k: seal[k] for k in SEAL_FIELDS}
    if hashlib.sha256(jcs(fields).encode("utf-8")).hexdigest() != seal["seal_hash"]:
        return "seal %s: seal_hash is not SHA-256(JCS(fields))" % seal["seq"]
    if seal["key_id"] is not None:
        public = keys.get(seal["key_id"])
        if public is None:
            return "seal %s: key %s is not listed" % (seal["seq"], seal["key_id"])
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(public)).verify(
                bytes.fromhex(seal["signature"] or ""), bytes.fromhex(seal["seal_hash"]))
        except (InvalidSignature, ValueError):
            return "seal %s: the signature does not verify" % seal["seq"]
    known = seals.setdefault(seal["seq"], seal)
    if known != seal:
        return "seal %s: two proofs show it differently" % seal["seq"]
    before = seals.get(seal["seq"] - 1)
    after = seals.get(seal["seq"] + 1)
    if before is not None and seal["prev_seal_hash"] != before["seal_hash"]:
        return "seal %s: does not chain to seal %s" % (seal["seq"], seal["seq"] - 1)
    if after is not None and after["prev_seal_hash"] != seal["seal_hash"]:
        return "seal %s: does not chain to seal %s" % (seal["seq"] + 1, seal["seq"])
    return None


def check_archive(path):
    """Checks a whole archive file; returns (what failed or None, summary)."""
    keys, prev, seal, leaves, seals, records = {}, None, None, [], 0, 0
    header = end = None

    def close():
        nonlocal prev, seal, leaves, seals
        if seal is None:
            return None
        if len(leaves) != seal["count"]:
            return "seal %s: the archive ends before record %s" % (seal["seq"], seal["call_ids"][len(leaves)])
        if merkle_root(leaves).hex() != seal["merkle_root"]:
            return "seal %s: its records do not make its merkle_root" % seal["seq"]
        prev, seal, leaves, seals = seal, None, [], seals + 1
        return None

    try:
        with open(path, "rb") as f:
            text = zstandard.ZstdDecompressor().stream_reader(f).read().decode("utf-8")
    except zstandard.ZstdError as e:
        return "the archive does not decompress (%s): it is truncated or not an archive" % e, None
    lines = text.split("\n")
    if lines[-1] != "":
        return "the archive's last line is cut short: it is truncated", None
    for raw in lines[:-1]:
        line = json.loads(raw)
        (kind, value), = line.items()
        if end is not None:
            return "a line after the end line", None
        if kind == "header":
            if header is not None or value["format"] != "writ-audit-archive" or value["v"] != 1:
                return "not a writ-audit-archive of version 1", None
            header = value
        elif kind == "key":
            public = bytes.fromhex(value["public_key"])
            if hashlib.sha256(public).hexdigest()[:16] != value["key_id"]:
                return "key %s is not the id of its public key" % value["key_id"], None
            keys[value["key_id"]] = value["public_key"]
        elif kind == "seal":
            problem = close()
            if problem:
                return problem, None
            fields = {k: value[k] for k in SEAL_FIELDS}
            if hashlib.sha256(jcs(fields).encode("utf-8")).hexdigest() != value["seal_hash"]:
                return "seal %s: seal_hash is not SHA-256(JCS(fields))" % value["seq"], None
            if prev is not None and (value["prev_seal_hash"] != prev["seal_hash"]
                                     or value["seq"] != prev["seq"] + 1
                                     or value["first"] != prev["last"] + 1):
                return "seal %s: does not chain to seal %s" % (value["seq"], prev["seq"]), None
            if value["key_id"] is not None:
                try:
                    Ed25519PublicKey.from_public_bytes(bytes.fromhex(keys[value["key_id"]])).verify(
                        bytes.fromhex(value["signature"] or ""), bytes.fromhex(value["seal_hash"]))
                except (InvalidSignature, ValueError, KeyError):
                    return "seal %s: the signature does not verify" % value["seq"], None
            seal = value
        elif kind == "record":
            if seal is None or len(leaves) >= seal["count"]:
                return "a record outside its seal's count", None
            if value.get("call_id") != seal["call_ids"][len(leaves)]:
                return "seal %s: record %s is missing or out of place" % (
                    seal["seq"], seal["call_ids"][len(leaves)]), None
            leaves.append(leaf_hash(jcs(value).encode("utf-8")))
            records += 1
        elif kind == "end":
            problem = close()
            if problem:
                return problem, None
            end = value
        else:
            return "an unknown line: %s" % kind, None
    if header is None or end is None:
        problem = close() if seal is not None and len(leaves) < seal["count"] else None
        return problem or "the archive ends before its end line: it is truncated", None
    if (end["seals"], end["records"]) != (seals, records) or (header["seals"], header["records"]) != (seals, records):
        return "the counts of its header or end line are not what it holds", None
    return None, "%d records in %d seals (%s..=%s)" % (records, seals, header["first_seal"], header["through_seal"])


def get(base, token, path):
    request = urllib.request.Request(base + path)
    if token:
        request.add_header("Authorization", "token " + token)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def main(argv):
    check_vectors()
    if argv[:1] == ["--archive"]:
        problem, summary = check_archive(argv[1])
        if problem is not None:
            print("FAIL " + problem)
            return 1
        print("ok: archive of " + summary)
        return 0
    if argv[:1] == ["--proof-file"]:
        with open(argv[1], encoding="utf-8") as f:
            given = json.load(f)
        keys = {k["key_id"]: k["public_key"] for k in given["keys"]}
        proofs = [given]
    else:
        base, token, calls = argv[0], argv[1], argv[2:]
        keys = {k["key_id"]: k["public_key"] for k in get(base, None, "/api/v1/audit/keys")}
        proofs = [get(base, token, "/api/v1/admin/audit/calls/%s/proof" % c) for c in calls]
    seals = {}
    for proof in proofs:
        problem = check_proof(proof, keys, seals)
        if problem is not None:
            print("FAIL " + problem)
            return 1
    print("ok: %d proofs in %d seals" % (len(proofs), len(seals)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
