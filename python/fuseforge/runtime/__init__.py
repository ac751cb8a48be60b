"""Running optimized models: OptimizedModule and optimize (module), the plan
executor, library calls (IR ops as torch calls), GEMM autotuning, precision
policies, the torch.compile backend and where CUTLASS's headers are."""
