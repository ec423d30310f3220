"""Local Triton kernels (device level), written once and driven by the ops above them.

- ``gemm``: the persistent GEMM of every TP GEMM op; its tile order is a table
  (``swizzle``: the distributed swizzle) and its tiles can wait for chunk signals, pull rows
  from peers or push partial tiles (``GemmHooks``).
- ``grouped_gemm``, ``gather_sum``, ``routing``: the expert-parallel kernels (per-expert
  GEMMs, the combine's weighted gather-sum, routing tables).
- ``fused_collective``: single-launch collectives within one node, CUDA-graph safe.
- ``tiles``: one-tile functions for task graphs (``ditron.task``).
- ``descriptors``, ``alignment``: host TMA descriptors, and whether pointer loads vectorize.
- ``tile_config``: the checks every tile configuration passes when it is built.
"""
