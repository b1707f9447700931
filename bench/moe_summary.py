"""Median row of bench/moe.sh: reads moe_bench JSON lines on stdin, label in argv[1]."""
import json
import statistics
import sys

label = sys.argv[1]
runs = [json.loads(line) for line in sys.stdin if line.strip()]


def med(key):
    return statistics.median(r[key] for r in runs)


read = med("decode_bytes_read_per_token") / 2**20
loaded = med("decode_bytes_loaded_per_token") / 2**20
print(
    f"| {label} | {med('pp_tps'):.1f} | {med('tg_tps'):.2f} | {med('hwm_kib') / 1024:.0f} "
    f"| {med('anon_kib') / 1024:.0f} | {med('file_kib') / 1024:.0f} "
    f"| {100 * med('decode_hit_rate'):.1f} % | {read:.1f} / {loaded:.1f} |"
)
