// The small part of c10 (c10/core, c10/util, c10/macros) the torch stand-in needs: scalar types,
// devices, Scalar, the export macros. Real files named per item.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

// c10/macros/Export.h: C10_API / TORCH_API are "default" visibility on a -fvisibility=hidden
// build, so exactly the annotated functions reach .dynsym.
#define C10_EXPORT __attribute__((visibility("default")))
#define C10_API C10_EXPORT
#define C10_CUDA_API C10_EXPORT
#define TORCH_API C10_EXPORT
#define TORCH_CUDA_CPP_API C10_EXPORT
#define TORCH_PYTHON_API C10_EXPORT
// A frame that must stay on the stack, as it does in the real (non-inlined) function.
#define TORCHLIKE_FRAME __attribute__((noinline))

namespace c10 {

// c10/core/ScalarType.h: the real enumerator values.
enum class ScalarType : int8_t { Int = 3, Long = 4, Float = 6, Double = 7, Bool = 11 };

inline std::size_t elementSize(ScalarType t) {
  switch (t) {
    case ScalarType::Int:
      return 4;
    case ScalarType::Long:
      return 8;
    case ScalarType::Float:
      return 4;
    case ScalarType::Double:
      return 8;
    case ScalarType::Bool:
      return 1;
  }
  return 0;
}
inline bool isFloatingType(ScalarType t) { return t == ScalarType::Float || t == ScalarType::Double; }

// c10/core/DeviceType.h
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };

// c10/core/Scalar.h, reduced to what item() and the scalar operands carry.
struct Scalar {
  double value = 0;
  ScalarType type = ScalarType::Double;
  template <typename T>
  T to() const {
    return static_cast<T>(value);
  }
};

// c10/util/Exception.h: TORCH_CHECK raises c10::Error; the bindings turn it into a Python error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace c10

#define TORCH_CHECK(cond, msg)            \
  do {                                    \
    if (!(cond)) throw ::c10::Error(msg); \
  } while (0)

namespace at {
using c10::DeviceType;
using c10::Scalar;
using c10::ScalarType;
constexpr ScalarType kLong = ScalarType::Long;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kDouble = ScalarType::Double;
constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kInt = ScalarType::Int;
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;
}  // namespace at
