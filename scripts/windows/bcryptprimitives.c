/* A stand-in for Windows 10's bcryptprimitives.dll, for Wine 8.0 test
 * prefixes only (Wine 8.0 lacks the DLL; Rust's std calls ProcessPrng).
 * ProcessPrng fills the buffer from RtlGenRandom (advapi32's
 * SystemFunction036), the same system generator. Never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
