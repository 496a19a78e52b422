"""The sandbox's seccomp filter: ``memory_filter`` (a classic BPF program
bubblewrap loads with ``--seccomp``).

It refuses the calls that make memory no address space counts: SysV
shared memory (``shmget``: a segment's pages stay after ``shmdt``) and
memory files (``memfd_create``, ``memfd_secret``: written with ``write``,
never mapped).  With them gone, ``RLIMIT_AS`` times the process cap bounds
what a sandbox's processes hold.  Everything else is allowed: this is not
a filter against kernel attack surface.  Must not know how the sandbox is
started (``agentrt.tools.sandbox._bwrap``).
"""

from __future__ import annotations

import errno
import platform
import struct
from typing import Final

__all__ = ["memory_filter"]

# classic BPF (linux/filter.h, linux/seccomp.h)
_LOAD_WORD: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQ: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_GE: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN: Final = 0x06  # BPF_RET | BPF_K
_ALLOW: Final = 0x7FFF_0000
_KILL_PROCESS: Final = 0x8000_0000
_REFUSE: Final = 0x0005_0000 | errno.ENOSYS  # callers fall back as on an old kernel
# struct seccomp_data: int nr; __u32 arch; ...
_NR: Final = 0
_ARCH: Final = 4
#: x32's calls on x86_64 carry this bit: none are allowed (they would name
#: the same calls by other numbers).
_X32: Final = 0x4000_0000

#: Per machine: (AUDIT_ARCH_*, whether x32 exists, refused call numbers:
#: shmget, memfd_create, memfd_secret).
_MACHINES: Final = {
    "x86_64": (0xC000_003E, True, (29, 319, 447)),
    "aarch64": (0xC000_00B7, False, (194, 279, 447)),
}


def _op(code: int, k: int, true: int = 0, false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, true, false, k)


def memory_filter(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one), as the bytes of its
    ``sock_filter`` array; ``None`` for a machine whose call numbers are
    not known here (then SysV shared memory and memory files stay
    allowed, and the memory bound does not cover them)."""
    known = _MACHINES.get(machine or platform.machine())
    if known is None:
        return None
    arch, x32, refused = known
    program = [
        _op(_LOAD_WORD, _ARCH),
        _op(_JUMP_EQ, arch, true=1),
        _op(_RETURN, _KILL_PROCESS),  # another ABI (i386's int 0x80): other numbers
        _op(_LOAD_WORD, _NR),
    ]
    if x32:
        program.append(_op(_JUMP_GE, _X32, true=len(refused) + 1))
    for index, number in enumerate(refused):
        # to the refusal: past the remaining checks and the allow
        program.append(_op(_JUMP_EQ, number, true=len(refused) - index))
    program += [_op(_RETURN, _ALLOW), _op(_RETURN, _REFUSE)]
    return b"".join(program)
