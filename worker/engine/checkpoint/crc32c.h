// CRC-32C (Castagnoli), the checksum of every checkpoint payload, index and marker.
//
// Why CRC-32C rather than zlib's CRC-32: x86-64 computes it in hardware (SSE4.2 `crc32`),
// several GB/s on one core, so checksumming hundreds of MB per shard costs little next
// to the disk; other CPUs fall back to a table-driven software path with identical
// results. No extra package is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace fp8::checkpoint {

// Checksum of `data` (standard CRC-32C: reflected, init and final xor 0xFFFFFFFF;
// Crc32c of "123456789" is 0xE3069283).
uint32_t crc32c(std::span<const std::byte> data);

// Continues a checksum over more data: crc32c_extend(crc32c(a), b) == crc32c(a + b).
// This is how payloads that are written or read in chunks are checksummed.
uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> data);

// The portable path, exposed so tests can check it agrees with the hardware path.
uint32_t crc32c_extend_software(uint32_t crc, std::span<const std::byte> data);

}  // namespace fp8::checkpoint
