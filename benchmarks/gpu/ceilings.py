#!/usr/bin/env python3
"""Measured ceilings of the GPU for roofline figures: device-to-device copy bandwidth (bytes read + written) and
the bf16 matrix rate, each on fresh random data, median of repeated CUDA-event timings."""
import torch


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    src = torch.randn(2 ** 30, device="cuda", dtype=torch.float32)  # 4 GiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    print(f"copy: {2 * src.numel() * 4 / ms / 1e6:.0f} GB/s (read+write, 4 GiB)")
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b)
    print(f"bf16 matmul {n}^3: {2 * n ** 3 / ms / 1e9:.0f} TFLOP/s")
    print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))


if __name__ == "__main__":
    main()
