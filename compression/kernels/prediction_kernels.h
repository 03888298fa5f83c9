// The table arithmetic of "<inner>+pred" (compression/codecs/predictive_codec.cpp), over rows of a
// [B, T, d] float tensor whose row b * T + t has token ID id[row] and position t. Every loop
// is elementwise in a fixed order, so both ends of a link compute the same floats.
#pragma once

#include <cstdint>

namespace skytrain::compression::prediction {

constexpr float kRate = 0.5f;  // how far a table moves toward what a message shows
// The tables learn from every kLearnEvery-th message of a stream (the first included): only
// those pay for the update, so the others cost the prediction and the inner codec alone.
// Every 4th was the first choice; every 16th keeps quality as well and reaches 0.5x memcpy
// at 4096x768 (docs/BENCHMARKS.md).
constexpr uint64_t kLearnEvery = 16;

struct Rows {
  const int64_t* id;  // token IDs, one per row
  int64_t t;          // rows per sequence
  int64_t d;          // floats per row
};

// The rows and the two tables: row r's prediction is token[id[r]] + position[r % t].
struct Predictor {
  Rows rows;
  const float* token;     // [vocab, d]
  const float* position;  // [t, d]
};

// Where a learning message's decoded residual r' goes (see accumulate): row r's adds into
// tokens[slot[id[r]]] and into positions[r % t].
struct Sums {
  const int32_t* slot;
  float* tokens;
  float* positions;
};

// Rows [first, end): out = in + sign * (token[id] + position[t]); in and out start at row first.
void predict(const Predictor& p, int64_t first, int64_t end, const float* in, float* out, float sign);
// Adds each row of `residual` (starting at row first) to its token's sum (sums, row slot[id])
// and to its position's sum.
void accumulate(const Rows& r, const int32_t* slot, float* sums, float* positions, int64_t first, int64_t end,
                const float* residual);
// For each of the first `rows` rows: out[t] += means[slot[id]].
void addMeans(const Rows& r, int64_t rows, const int32_t* slot, const float* means, float* out);
// mean *= inverse (the count's), in place; token += kRate * mean.
void meanStep(float* mean, float inverse, float* token, int64_t d);
// position += kRate * ((sums - kRate * means) * inverse), element by element.
void positionStep(const float* sums, const float* means, float inverse, float* position, int64_t n);

}  // namespace skytrain::compression::prediction
