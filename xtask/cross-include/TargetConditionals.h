/*
 * A stand-in for the macOS SDK's <TargetConditionals.h>, for `cargo xtask platforms` only: it
 * checks the macOS targets from Linux, where there is no SDK. ring's C includes this header on
 * Apple targets (include/ring-core/base.h) and reads TARGET_OS_OSX and TARGET_OS_IPHONE from it
 * only to define OPENSSL_MACOS and OPENSSL_IOS, which none of its 0.17 code reads. The values
 * are the SDK's for macOS, so that a ring which starts reading them is compiled as on a Mac.
 * Nothing built with it is linked: the checks are `cargo clippy`.
 */
#ifndef LEASE_XTASK_TARGET_CONDITIONALS_H
#define LEASE_XTASK_TARGET_CONDITIONALS_H
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_VISION 0
#define TARGET_OS_MACCATALYST 0
#define TARGET_OS_SIMULATOR 0
#endif
