//===- Gemm.cu - bf16 GEMMs through cuBLASLt ------------------------------===//
//
// Row-major Y[m][n] = X[m][k] . W[n][k]^T is, in cuBLASLt's column-major
// terms, D (n x m, ld yStride) = op(A) . B with A = W stored k x n (ld
// wStride) and transposed, B = X stored k x m (ld xStride): no copy, no
// transposition kernel. A problem's descriptors and heuristic algorithm are
// made once per shape (sizes, strides, output type, beta and the pointers'
// alignment, which the algorithms depend on) and kept. Row-invariant
// engines choose one algorithm per shape but its rows (GemmOptions).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/Gemm.h"

#include "runtime/kernels/cuda/CublasLt.cuh"
#include "runtime/kernels/cuda/CudaCheck.cuh"

#include <map>
#include <tuple>

namespace spanc::cuda {

namespace {

/// The largest power of two (at most 256) dividing the address.
int alignmentOf(const void *pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  int alignment = 256;
  while (alignment > 1 && address % uintptr_t(alignment) != 0)
    alignment /= 2;
  return alignment;
}

struct ShapeKey {
  int64_t rows, columns, depth, xStride, wStride, yStride;
  int outputType, accumulate, xAlign, wAlign, yAlign;
  bool operator<(const ShapeKey &other) const {
    return std::tie(rows, columns, depth, xStride, wStride, yStride, outputType,
                    accumulate, xAlign, wAlign, yAlign) <
           std::tie(other.rows, other.columns, other.depth, other.xStride,
                    other.wStride, other.yStride, other.outputType,
                    other.accumulate, other.xAlign, other.wAlign, other.yAlign);
  }
};

/// The descriptors and algorithm of one problem shape.
struct ShapePlan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algorithm;

  void destroy() {
    if (operation)
      cublasLt().cublasLtMatmulDescDestroy(operation);
    for (cublasLtMatrixLayout_t layout : {a, b, d})
      if (layout)
        cublasLt().cublasLtMatrixLayoutDestroy(layout);
    operation = nullptr;
    a = b = d = nullptr;
  }
};

} // namespace

struct GemmEngine::Impl {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  bool rowInvariant = false;
  std::map<ShapeKey, ShapePlan> plans;
  /// Row-invariant engines: the algorithm of each shape, keyed with rows 0.
  std::map<ShapeKey, cublasLtMatmulAlgo_t> invariantAlgorithms;

  ~Impl() {
    for (auto &entry : plans)
      entry.second.destroy();
    if (workspace)
      cudaFree(workspace);
    if (handle)
      cublasLt().cublasLtDestroy(handle);
  }

  Status planFor(const GemmProblem &problem, const ShapeKey &key,
                 ShapePlan *&result);
  /// The heuristic's first algorithm for `plan`'s descriptors.
  Status heuristic(const ShapePlan &plan, const ShapeKey &key, bool noReduction,
                   cublasLtMatmulAlgo_t &algorithm);
  /// The row-invariant algorithm of `problem`'s shape.
  Status invariantAlgorithm(const GemmProblem &problem, const ShapeKey &key,
                            cublasLtMatmulAlgo_t &algorithm);
};

namespace {

/// Creates `plan`'s descriptors for `problem` (destroyed by the caller).
Status makeDescriptors(const GemmProblem &problem, ShapePlan &plan) {
  const cudaDataType_t outputType =
      problem.outputType == GemmOutputType::Bf16 ? CUDA_R_16BF : CUDA_R_32F;
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmulDescCreate(
      &plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmulDescSetAttribute(
      plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
      sizeof(transpose)));
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmulDescSetAttribute(
      plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  SPANC_BLAS_CALL(cublasLt().cublasLtMatrixLayoutCreate(
      &plan.a, CUDA_R_16BF, uint64_t(problem.depth), uint64_t(problem.columns),
      problem.wStride));
  SPANC_BLAS_CALL(cublasLt().cublasLtMatrixLayoutCreate(
      &plan.b, CUDA_R_16BF, uint64_t(problem.depth), uint64_t(problem.rows),
      problem.xStride));
  SPANC_BLAS_CALL(cublasLt().cublasLtMatrixLayoutCreate(
      &plan.d, outputType, uint64_t(problem.columns), uint64_t(problem.rows),
      problem.yStride));
  return Status::success();
}

std::string shapeText(const GemmProblem &problem) {
  return std::to_string(problem.rows) + "x" + std::to_string(problem.columns) +
         "x" + std::to_string(problem.depth);
}

/// Destroys a plan's descriptors when a step of making it fails.
struct PlanGuard {
  ShapePlan *plan;
  ~PlanGuard() {
    if (plan)
      plan->destroy();
  }
};

} // namespace

Status GemmEngine::Impl::heuristic(const ShapePlan &plan, const ShapeKey &key,
                                   bool noReduction,
                                   cublasLtMatmulAlgo_t &algorithm) {
  cublasLtMatmulPreference_t preference = nullptr;
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmulPreferenceCreate(&preference));
  const uint32_t alignA = uint32_t(key.wAlign), alignB = uint32_t(key.xAlign),
                 alignD = uint32_t(key.yAlign);
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasStatus_t status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA,
        sizeof(alignA));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB,
        sizeof(alignB));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignD,
        sizeof(alignD));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignD,
        sizeof(alignD));
  if (status == CUBLAS_STATUS_SUCCESS && noReduction)
    status = cublasLt().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
        sizeof(reduction));
  cublasLtMatmulHeuristicResult_t result = {};
  int count = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().cublasLtMatmulAlgoGetHeuristic(
        handle, plan.operation, plan.a, plan.b, plan.d, plan.d, preference, 1,
        &result, &count);
  cublasLt().cublasLtMatmulPreferenceDestroy(preference);
  SPANC_CUDA_TRY(blasStatus(status, "cublasLtMatmulAlgoGetHeuristic"));
  if (count == 0)
    return Status::failure(
        "cublasLtMatmulAlgoGetHeuristic: no algorithm for this bf16 GEMM");
  algorithm = result.algo;
  return Status::success();
}

Status GemmEngine::Impl::invariantAlgorithm(const GemmProblem &problem,
                                            const ShapeKey &key,
                                            cublasLtMatmulAlgo_t &algorithm) {
  ShapeKey shapeKey = key;
  shapeKey.rows = 0;
  auto found = invariantAlgorithms.find(shapeKey);
  if (found != invariantAlgorithms.end()) {
    algorithm = found->second;
    return Status::success();
  }
  GemmProblem canonical = problem;
  canonical.rows = kRowInvariantRows;
  ShapePlan plan;
  PlanGuard guard{&plan};
  SPANC_CUDA_TRY(makeDescriptors(canonical, plan));
  SPANC_CUDA_TRY(heuristic(plan, key, /*noReduction=*/true, algorithm));
  // No split of the depth, whatever the heuristic's default.
  const int32_t splits = 1;
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmulAlgoConfigSetAttribute(
      &algorithm, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)));
  invariantAlgorithms.emplace(shapeKey, algorithm);
  return Status::success();
}

Status GemmEngine::Impl::planFor(const GemmProblem &problem,
                                 const ShapeKey &key, ShapePlan *&result) {
  auto found = plans.find(key);
  if (found != plans.end()) {
    result = &found->second;
    return Status::success();
  }
  ShapePlan plan;
  PlanGuard guard{&plan};
  SPANC_CUDA_TRY(makeDescriptors(problem, plan));
  if (rowInvariant) {
    SPANC_CUDA_TRY(invariantAlgorithm(problem, key, plan.algorithm));
    cublasLtMatmulHeuristicResult_t check = {};
    const cublasStatus_t status = cublasLt().cublasLtMatmulAlgoCheck(
        handle, plan.operation, plan.a, plan.b, plan.d, plan.d, &plan.algorithm,
        &check);
    if (status != CUBLAS_STATUS_SUCCESS || check.workspaceSize > workspaceBytes)
      return Status::failure(
          "cublasLtMatmulAlgoCheck: the row-invariant algorithm cannot run a " +
          shapeText(problem) + " bf16 GEMM (" +
          cublasLt().cublasLtGetStatusName(status) + ")");
  } else {
    SPANC_CUDA_TRY(heuristic(plan, key, /*noReduction=*/false, plan.algorithm));
  }
  guard.plan = nullptr;
  result = &plans.emplace(key, plan).first->second;
  return Status::success();
}

GemmEngine::GemmEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmEngine::~GemmEngine() = default;

Status GemmEngine::create(std::unique_ptr<GemmEngine> &engine,
                          size_t workspaceBytes) {
  GemmOptions options;
  options.workspaceBytes = workspaceBytes;
  return create(engine, options);
}

Status GemmEngine::create(std::unique_ptr<GemmEngine> &engine,
                          const GemmOptions &options) {
  SPANC_CUDA_TRY(loadCublasLt());
  auto impl = std::make_unique<Impl>();
  SPANC_BLAS_CALL(cublasLt().cublasLtCreate(&impl->handle));
  SPANC_CUDA_TRY(allocate(&impl->workspace, options.workspaceBytes));
  impl->workspaceBytes = options.workspaceBytes;
  impl->rowInvariant = options.rowInvariant;
  engine.reset(new GemmEngine(std::move(impl)));
  return Status::success();
}

Status checkGemmProblem(const GemmProblem &problem) {
  auto fail = [&](const std::string &why) {
    return invalidArgument("GemmEngine::multiply", why);
  };
  if (problem.rows <= 0 || problem.columns <= 0 || problem.depth <= 0)
    return fail("sizes " + std::to_string(problem.rows) + "x" +
                std::to_string(problem.columns) + "x" +
                std::to_string(problem.depth) + " must be positive");
  if (problem.xStride < problem.depth || problem.wStride < problem.depth ||
      problem.yStride < problem.columns)
    return fail("a stride is below its row width");
  if (!problem.x || !problem.w || !problem.y)
    return fail("a null matrix");
  return Status::success();
}

Status GemmEngine::multiply(const GemmProblem &problem, Stream stream) {
  SPANC_CUDA_TRY(checkGemmProblem(problem));
  const ShapeKey key{problem.rows,
                     problem.columns,
                     problem.depth,
                     problem.xStride,
                     problem.wStride,
                     problem.yStride,
                     int(problem.outputType),
                     problem.accumulate ? 1 : 0,
                     alignmentOf(problem.x),
                     alignmentOf(problem.w),
                     alignmentOf(problem.y)};
  ShapePlan *plan = nullptr;
  SPANC_CUDA_TRY(impl_->planFor(problem, key, plan));
  const float alpha = 1.0f, beta = problem.accumulate ? 1.0f : 0.0f;
  SPANC_BLAS_CALL(cublasLt().cublasLtMatmul(
      impl_->handle, plan->operation, &alpha, problem.w, plan->a, problem.x,
      plan->b, &beta, problem.y, plan->d, problem.y, plan->d, &plan->algorithm,
      impl_->workspace, impl_->workspaceBytes, stream));
  return Status::success();
}

} // namespace spanc::cuda
