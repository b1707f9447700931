"""Replays a greedy answer through prompt-lookup drafter variants and
predicts each one's speed-up over plain decoding, without running the model:
how NGRAM_MIN / NGRAM_MAX / DEFAULT_MAX_DRAFT in crates/runtime/src/spec.rs
were chosen (2026-12-05; the replay gave Qwen2.5-Coder-1.5B's edit 2.96x for
the old drafter where bench/spec.sh measured 2.93x).

Each step: the drafter proposes a continuation of prompt + answer so far
(the rules of spec.rs: longest suffix match of min_n..max_n tokens, most
recent among equals; the adaptive draft length and pauses of DraftLength);
the accepted tokens are the draft's longest prefix that equals the answer,
plus the one token the check itself yields. A check of k rows costs what
examples/spec_probe measured for k rows (interpolated), a plain step 1.

Usage:
  gpack tokenize MODEL --file PROMPT_AS_TEMPLATED.txt > prompt.ids
  gpack run MODEL --chat -p "$(cat bench/data/spec/edit.prompt)" -n 256 --spec none > answer.txt
  gpack tokenize MODEL --file answer.txt > answer.ids
  cargo run --release -p gpack-runtime --example spec_probe -- MODEL.gpack 800 > probe.txt
  python3 bench/spec_replay.py prompt.ids answer.ids probe.txt
"""

import re
import sys


def costs(probe_text):
    c = {int(k): float(x) for k, x in re.findall(r"k=\s*(\d+) forward median .*?\(([\d.]+)x one token", probe_text)}
    if 1 not in c:
        sys.exit("no 'k= 1 forward median' line in the spec_probe output")
    return c


def cost(c, k):
    if k in c:
        return c[k]
    ks = sorted(c)
    for a, b in zip(ks, ks[1:]):
        if a < k < b:
            return c[a] + (c[b] - c[a]) * (k - a) / (b - a)
    return c[ks[-1]] * k / ks[-1]


class DraftLength:
    """spec.rs's DraftLength."""

    def __init__(self, start, mx):
        self.k, self.max, self.misses, self.pause = min(max(start, 1), mx), mx, 0, 0

    def for_step(self):
        if self.pause > 0:
            self.pause -= 1
            return 0
        return self.k

    def observe(self, d, a):
        if d == 0:
            return
        if a == 0 and self.k == 1:
            self.misses += 1
            self.pause = 1 << min(self.misses, 6)
        elif a > 0:
            self.misses = 0
        if a == d:
            self.k = min(self.k * 2, self.max)
        elif a == 0:
            self.k = max(self.k // 2, 1)
        else:
            self.k = min(a + 1, self.max)


def lookup(h, min_n, max_n):
    """spec.rs's lookup: the continuation's start, or None."""
    best = None
    last = h[-1]
    for e in range(len(h) - 2, -1, -1):
        if h[e] != last:
            continue
        m = 0
        while m < min(max_n, e + 1) and h[e - m] == h[len(h) - 1 - m]:
            m += 1
        if m >= min_n and (best is None or m > best[0]):
            best = (m, e + 1)
            if m == max_n:
                break
    return best and best[1]


def replay(c, prompt, answer, min_n, max_n, max_draft):
    ln = DraftLength(4, max_draft)
    i = total = checks = drafted = accepted = 0
    while i < len(answer):
        h = prompt + answer[:i]
        k = ln.for_step()
        d = []
        if k > 0:
            at = lookup(h, min_n, max_n)
            if at is not None:
                d = h[at:at + k]
        a = 0
        while a < len(d) and i + a < len(answer) and d[a] == answer[i + a]:
            a += 1
        total += cost(c, 1 + len(d))
        checks += 1
        drafted += len(d)
        accepted += a
        ln.observe(len(d), a)
        i += a + 1
    return len(answer) / total, len(answer) / checks, accepted / drafted if drafted else 0.0


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    prompt = [int(x) for x in open(sys.argv[1]).read().split()]
    answer = [int(x) for x in open(sys.argv[2]).read().split()]
    c = costs(open(sys.argv[3]).read())
    print("| min_n..max_n | max draft | predicted speed-up | tokens per forward | acceptance |")
    print("|---|---|---|---|---|")
    for min_n, max_n, mx in [(2, 4, 7), (2, 8, 7), (2, 12, 7), (1, 8, 7), (3, 8, 7), (2, 8, 5), (2, 8, 15)]:
        s, tpf, acc = replay(c, prompt, answer, min_n, max_n, mx)
        print(f"| {min_n}..{max_n} | {mx} | {s:.2f}x | {tpf:.2f} | {acc:.2f} |")


if __name__ == "__main__":
    main()
