// The per-element loops of "+pred" (compression/kernels/prediction_kernels.h), each built twice:
// portable and for AVX2, without FMA, so that both builds give the same floats (two ends on
// different CPUs keep equal tables). The public functions pick one at run time.
#include "compression/kernels/prediction_kernels.h"

namespace skytrain::compression::prediction {
namespace {

// Rows [first, end): out = in + sign * (token[id] + position[t]); in and out start at row first.
__attribute__((always_inline)) inline void predictBody(const Predictor& p, int64_t first, int64_t end, const float* in,
                                                       float* out, float sign) {
  const Rows& r = p.rows;
  for (int64_t row = first; row < end; ++row) {
    const float* __restrict a = p.token + r.id[row] * r.d;
    const float* __restrict b = p.position + (row % r.t) * r.d;
    const float* __restrict x = in + (row - first) * r.d;
    float* __restrict y = out + (row - first) * r.d;
    for (int64_t j = 0; j < r.d; ++j) y[j] = x[j] + sign * (a[j] + b[j]);
  }
}

// Adds each row of `residual` (starting at row first) to its token's sum (sums, by slot[id])
// and to its position's sum.
__attribute__((always_inline)) inline void accumulateBody(const Rows& r, const int32_t* slot, float* sums,
                                                          float* positions, int64_t first, int64_t end,
                                                          const float* residual) {
  for (int64_t row = first; row < end; ++row) {
    float* __restrict sum = sums + slot[r.id[row]] * r.d;
    float* __restrict position = positions + (row % r.t) * r.d;
    const float* __restrict x = residual + (row - first) * r.d;
    for (int64_t j = 0; j < r.d; ++j) {
      sum[j] += x[j];
      position[j] += x[j];
    }
  }
}

// For every row: out[t] += means[slot[id]].
__attribute__((always_inline)) inline void addMeansBody(const Rows& r, int64_t rows, const int32_t* slot,
                                                        const float* means, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* __restrict mean = means + slot[r.id[row]] * r.d;
    float* __restrict sum = out + (row % r.t) * r.d;
    for (int64_t j = 0; j < r.d; ++j) sum[j] += mean[j];
  }
}

void predictPortable(const Predictor& p, int64_t first, int64_t end, const float* in, float* out, float sign) {
  predictBody(p, first, end, in, out, sign);
}
__attribute__((target("avx2"))) void predictAvx2(const Predictor& p, int64_t first, int64_t end, const float* in,
                                                 float* out, float sign) {
  predictBody(p, first, end, in, out, sign);
}
void accumulatePortable(const Rows& r, const int32_t* slot, float* sums, float* positions, int64_t first,
                        int64_t end, const float* residual) {
  accumulateBody(r, slot, sums, positions, first, end, residual);
}
__attribute__((target("avx2"))) void accumulateAvx2(const Rows& r, const int32_t* slot, float* sums,
                                                    float* positions, int64_t first, int64_t end,
                                                    const float* residual) {
  accumulateBody(r, slot, sums, positions, first, end, residual);
}
void addMeansPortable(const Rows& r, int64_t rows, const int32_t* slot, const float* means, float* out) {
  addMeansBody(r, rows, slot, means, out);
}
__attribute__((target("avx2"))) void addMeansAvx2(const Rows& r, int64_t rows, const int32_t* slot,
                                                  const float* means, float* out) {
  addMeansBody(r, rows, slot, means, out);
}

__attribute__((always_inline)) inline void meanStepBody(float* __restrict mean, float inverse, float* __restrict token,
                                                        int64_t d) {
  for (int64_t j = 0; j < d; ++j) {
    mean[j] *= inverse;
    token[j] += kRate * mean[j];
  }
}
void meanStepPortable(float* mean, float inverse, float* token, int64_t d) { meanStepBody(mean, inverse, token, d); }
__attribute__((target("avx2"))) void meanStepAvx2(float* mean, float inverse, float* token, int64_t d) {
  meanStepBody(mean, inverse, token, d);
}

// position += rate * ((sums - rate * means) * inverse), element by element.
__attribute__((always_inline)) inline void positionStepBody(const float* __restrict sums, const float* __restrict means,
                                                            float inverse, float* __restrict position, int64_t n) {
  for (int64_t i = 0; i < n; ++i) position[i] += kRate * ((sums[i] - kRate * means[i]) * inverse);
}
void positionStepPortable(const float* sums, const float* means, float inverse, float* position, int64_t n) {
  positionStepBody(sums, means, inverse, position, n);
}
__attribute__((target("avx2"))) void positionStepAvx2(const float* sums, const float* means, float inverse,
                                                      float* position, int64_t n) {
  positionStepBody(sums, means, inverse, position, n);
}

bool haveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

}  // namespace

void predict(const Predictor& p, int64_t first, int64_t end, const float* in, float* out, float sign) {
  (haveAvx2() ? predictAvx2 : predictPortable)(p, first, end, in, out, sign);
}

void accumulate(const Rows& r, const int32_t* slot, float* sums, float* positions, int64_t first, int64_t end,
                const float* residual) {
  (haveAvx2() ? accumulateAvx2 : accumulatePortable)(r, slot, sums, positions, first, end, residual);
}

void addMeans(const Rows& r, int64_t rows, const int32_t* slot, const float* means, float* out) {
  (haveAvx2() ? addMeansAvx2 : addMeansPortable)(r, rows, slot, means, out);
}

void meanStep(float* mean, float inverse, float* token, int64_t d) {
  (haveAvx2() ? meanStepAvx2 : meanStepPortable)(mean, inverse, token, d);
}

void positionStep(const float* sums, const float* means, float inverse, float* position, int64_t n) {
  (haveAvx2() ? positionStepAvx2 : positionStepPortable)(sums, means, inverse, position, n);
}


}  // namespace skytrain::compression::prediction
