// Compiled with -mavx2 on x86-64 (see BUILD): callers check
// IsaAvailable(HashIsa::kAvx2) first. No inline code shared with other
// translation units is instantiated here.
#include "kernels/hash/read_bandwidth.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#endif

namespace lockstep::hash::bench {

#if defined(__x86_64__) && defined(__AVX2__)

uint64_t ReadSum(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  __m256i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 256) {
    const __m256i* v = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + 0));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + 1));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + 2));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + 3));
    a4 = _mm256_add_epi64(a4, _mm256_load_si256(v + 4));
    a5 = _mm256_add_epi64(a5, _mm256_load_si256(v + 5));
    a6 = _mm256_add_epi64(a6, _mm256_load_si256(v + 6));
    a7 = _mm256_add_epi64(a7, _mm256_load_si256(v + 7));
  }
  const __m256i s = _mm256_add_epi64(
      _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
      _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t ReadSumNonTemporal(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  __m256i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 256) {
    const __m256i* v = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_stream_load_si256(v + 0));
    a1 = _mm256_add_epi64(a1, _mm256_stream_load_si256(v + 1));
    a2 = _mm256_add_epi64(a2, _mm256_stream_load_si256(v + 2));
    a3 = _mm256_add_epi64(a3, _mm256_stream_load_si256(v + 3));
    a4 = _mm256_add_epi64(a4, _mm256_stream_load_si256(v + 4));
    a5 = _mm256_add_epi64(a5, _mm256_stream_load_si256(v + 5));
    a6 = _mm256_add_epi64(a6, _mm256_stream_load_si256(v + 6));
    a7 = _mm256_add_epi64(a7, _mm256_stream_load_si256(v + 7));
  }
  const __m256i s = _mm256_add_epi64(
      _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
      _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void ZeroUpperState() { _mm256_zeroupper(); }

#else

uint64_t ReadSum(const void*, size_t) { return 0; }
uint64_t ReadSumNonTemporal(const void*, size_t) { return 0; }
void ZeroUpperState() {}

#endif

}  // namespace lockstep::hash::bench
