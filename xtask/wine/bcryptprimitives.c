/* ProcessPrng, the one export of bcryptprimitives.dll that Rust's std (1.78 and later) imports
 * on Windows for its random keys (HashMap seeds). Wine 8.0, Debian 12's, has no
 * bcryptprimitives.dll (Wine 9 added it), so every Rust test binary fails to load
 * (c0000135). `cargo xtask platforms` builds this stub with the MinGW compiler into its own
 * Wine prefix; it fills the buffer from RtlGenRandom (advapi32's SystemFunction036). Used only
 * to run the tests under Wine, never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
