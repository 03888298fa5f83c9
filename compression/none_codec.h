// "none": the identity codec. Sends the tensor's raw bytes; decode is bit-exact.
#pragma once

#include <memory>
#include <string>

#include "compression/codec.h"

namespace skytrain::compression {

std::unique_ptr<Codec> makeNoneCodec(const std::string& argument);

}  // namespace skytrain::compression
