// The built-in codecs' factories (registered in registerBuiltinCodecs). Each codec's error
// bound is stated on its implementation and asserted by tests/compression/codec_contract_test.
// Element codecs (none, fp16, bf16, int8, int4, q13, int3) refuse an inner codec; structural codecs
// (svd, topk) use `inner` for their float parts, "none" when it is null.
#pragma once

#include <memory>
#include <string>

#include "compression/codec.h"

namespace skytrain::compression {

using CodecPtr = std::unique_ptr<Codec>;

CodecPtr makeNoneCodec(const std::string& argument, CodecPtr inner);
CodecPtr makeFp16Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeBf16Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeInt8Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeInt4Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeInt3Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeQ13Codec(const std::string& argument, CodecPtr inner);
CodecPtr makeTopKCodec(const std::string& argument, CodecPtr inner);  // "topk:<fraction>"
CodecPtr makeSvdCodec(const std::string& argument, CodecPtr inner);   // "svd:<ratio>" | "svd:rank=<r>"
CodecPtr makeTokenCodec(const std::string& argument, CodecPtr inner);  // "tokens": IDs + bit-packed labels
CodecPtr makeZstdCodec(const std::string& argument, CodecPtr inner);      // "<inner>+zstd": lossless bytes
CodecPtr makeRotationCodec(const std::string& argument, CodecPtr inner);  // "<inner>+rot": Hadamard rotation
// "<inner>+pred": the inner codec on the tensor less a prediction from its token IDs (side_tokens.h).
CodecPtr makePredictiveCodec(const std::string& argument, CodecPtr inner);
// Adds each message's residual (input minus what the receiver decodes) to the next one.
CodecPtr makeErrorFeedbackCodec(CodecPtr inner);

}  // namespace skytrain::compression
