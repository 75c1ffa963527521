"""Benchmarks of the course: how fast it runs, and how close tfmlib comes to PyTorch.

Run `make bench` (or `python -m benchmarks`, `--quick` for a smoke run). Modules:
`timing` (interleaved timing, machine description), `kernels` (tfmlib beside PyTorch:
attention, multi-head attention, encoder layer, Adam), `course` (notebooks headless,
notebook 10's training, widget redraws), `report` (RESULTS.md and the plot).
"""
