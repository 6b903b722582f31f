"""Fused one-pass kernel of the NoisyGD / AdaMix private release (numba, float32).

:func:`clipped_sum` computes, for the linear softmax head and rows ``lo .. hi-1`` of ``X``,

    ``S = sum_i c_i x_i (p_i - y_i)^T``  with  ``c_i = min(1, tau / (||x_i|| ||p_i - y_i||))``,

i.e. the sum of the per-sample gradients ``g_i = x_i (p_i - y_i)^T`` clipped to Frobenius norm
``tau`` (``||g_i||_F = ||x_i|| ||p_i - y_i||``, closed form for the rank-one gradient). This is
the quantity whose L2 sensitivity under add/remove of one private row is ``tau`` (one term of
norm ``<= tau`` appears or disappears); the engine
(:func:`mixdp_core.methods.adamix.engine.private_release`) adds the Gaussian noise calibrated
by :mod:`mixdp_core.accounting` and applies the projection, exactly as for the numpy kernel,
so the mechanism is the same and only the arithmetic is reorganized (:mod:`.numba_backend`
drives this module). It also returns the
per-sample cross-entropy ``-log p_{i, y_i}`` and ``c_i ||p_i - y_i||`` (from which :mod:`.numba_backend`
forms the per-instance DP ratio ``r_i = c_i ||U^T x_i|| ||p_i - y_i|| / tau``).

Why a compiled kernel: with ``C = 10`` columns the two BLAS products ``X W`` and
``(c E)^T X`` are skinny, and OpenBLAS runs them at ~35 GFLOP/s on one core even when the
block is in cache, i.e. ~3.2x the time of one streaming pass ``X.sum()`` before any softmax
work (``benchmarks/train.py``, key ``two_gemm_in_cache_over_stream``). Here each group of 4
rows is read from memory once per step and used for both products while it sits in L1: the
forward dot products are register-blocked 4 rows x 3 classes (:func:`_dot4x3`, 7 vector loads
per 12 FMAs; 4 x 2 for a remainder), the softmax and clip factor are scalar work on the 4 x C
logits, and the backward update ``S[c] += sum_r e_{r,c} x_r`` takes 2 classes at a time (one
read-modify-write of ``S`` per 4 rows instead of one per row). Partial sums are kept in float32
for 512 rows and then added to a float64 total (more accurate than one float32 running sum).

Only ``C - 1`` classes are multiplied with ``X``, in both directions (exact identities, the
released quantity is unchanged): softmax is shift-invariant, so the logits are taken relative
to the last class (``x_i . (W_c - W_{C-1})``, :func:`shifted_weights`; the last logit is 0),
and ``sum_c (p_ic - y_ic) = 0`` for every row, so the last column of ``S`` is minus the sum of
the others (formed in float64 from the float32 partial sums). That removes 1/C of the
arithmetic (10 % at C = 10; 9 classes are 3 blocks of 4 x 3). The per-sample factors ``c_i``
and ``||p_i - y_i||`` are computed from all ``C`` residuals as before.

numba is imported only when this module is; :func:`available` says whether it can be. The
first call compiles (~4 s of CPU, once per machine: ``cache=True`` stores the machine code
next to this file, or in numba's user-wide cache directory when that is not writable; later
processes pay ~0.75-0.9 s for the numba import and the cache load); the CPU release uses this
kernel only for problems large enough to repay that
(:data:`mixdp_core.methods.adamix.kernels.cpu.FUSED_MIN_BYTES`), never on the digits fast path.
"""

from __future__ import annotations

import numpy as np

try:  # numba is pinned in requirements.txt; without it the CPU release keeps the numpy kernel
    import numba as _numba
except ImportError:  # pragma: no cover - exercised only on installs without numba
    _numba = None

#: Rows per float32 partial sum before it is added to the float64 total: a precision bound, not
#: a speed one. 512 float32 additions keep a partial's relative rounding under 512 · 2⁻²⁴ ≈ 3e-5
#: of its terms before the float64 total takes over (tests/methods/test_release_kernels.py holds
#: the kernel to the reference release).
PARTIAL_ROWS = 512


def shifted_weights(W: np.ndarray) -> np.ndarray:
    """``(C - 1, D)`` float32 ``(W_c - W_{C-1})^T``, ``c < C - 1``: the operand of :func:`clipped_sum`.

    Softmax and cross-entropy are invariant to adding the same number to every logit, so the
    logits ``z_ic - z_{i,C-1} = x_i . (W_c - W_{C-1})`` with ``z_{i,C-1} = 0`` give the same
    ``p_i`` and loss; the difference is taken in float64 and rounded once.
    """
    W64 = np.asarray(W, dtype=np.float64)
    return np.ascontiguousarray((W64[:, :-1] - W64[:, -1:]).T, dtype=np.float32)


def available() -> bool:
    """Whether numba could be imported (the fused kernel can run)."""
    return _numba is not None


if _numba is not None:
    _jit = _numba.njit(fastmath=True, cache=True, boundscheck=False, nogil=True)

    @_numba.njit(fastmath=True, cache=True, boundscheck=False, nogil=True, inline="always")
    def _dot4x2(x0, x1, x2, x3, w0, w1, D):  # pragma: no cover - compiled
        # 8 independent accumulators; fastmath lets LLVM vectorize the reduction over d
        a00 = np.float32(0.0)
        a01 = np.float32(0.0)
        a10 = np.float32(0.0)
        a11 = np.float32(0.0)
        a20 = np.float32(0.0)
        a21 = np.float32(0.0)
        a30 = np.float32(0.0)
        a31 = np.float32(0.0)
        for d in range(D):
            u = w0[d]
            v = w1[d]
            a00 += x0[d] * u
            a01 += x0[d] * v
            a10 += x1[d] * u
            a11 += x1[d] * v
            a20 += x2[d] * u
            a21 += x2[d] * v
            a30 += x3[d] * u
            a31 += x3[d] * v
        return a00, a01, a10, a11, a20, a21, a30, a31

    @_numba.njit(fastmath=True, cache=True, boundscheck=False, nogil=True, inline="always")
    def _dot4x3(x0, x1, x2, x3, w0, w1, w2, D):  # pragma: no cover - compiled
        # 12 accumulators + 3 weight vectors = the 16 AVX2 registers: 7 loads per 12 FMAs, and
        # 12 independent chains hide the FMA latency better than the 8 of _dot4x2
        a00 = np.float32(0.0)
        a01 = np.float32(0.0)
        a02 = np.float32(0.0)
        a10 = np.float32(0.0)
        a11 = np.float32(0.0)
        a12 = np.float32(0.0)
        a20 = np.float32(0.0)
        a21 = np.float32(0.0)
        a22 = np.float32(0.0)
        a30 = np.float32(0.0)
        a31 = np.float32(0.0)
        a32 = np.float32(0.0)
        for d in range(D):
            u = w0[d]
            v = w1[d]
            t = w2[d]
            p = x0[d]
            a00 += p * u
            a01 += p * v
            a02 += p * t
            p = x1[d]
            a10 += p * u
            a11 += p * v
            a12 += p * t
            p = x2[d]
            a20 += p * u
            a21 += p * v
            a22 += p * t
            p = x3[d]
            a30 += p * u
            a31 += p * v
            a32 += p * t
        return a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32

    from llvmlite import ir as _ir
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _bits_to_f32(typingctx, v):  # pragma: no cover - compiled
        """The float32 whose IEEE-754 bits are the int32 ``v`` (a register move, vectorizable)."""
        sig = _numba.types.float32(_numba.types.int32)

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], _ir.FloatType())

        return sig, codegen

    @_numba.njit(fastmath=True, cache=True, boundscheck=False, nogil=True, inline="always")
    def _expf(x):  # pragma: no cover - compiled
        """``exp(x)`` in float32 for ``x <= 0`` without a libm call, so that LLVM vectorizes the
        loop over the 4 x C logits (numba has no vector exp without Intel's SVML).

        Cody-Waite reduction ``x = n ln 2 + r``, ``|r| <= ln 2 / 2``, and the degree-7
        polynomial of Cephes' ``expf`` (Moshier, public domain coefficients), times ``2^n``
        built from its exponent bits. Max relative error 3e-7 (~2.5 ulp) on ``[-87, 0]``
        (``tests/methods/test_release_kernels.py``); below -87 (``exp < 1.7e-38``, a
        probability that vanishes beside the largest one, 1) it returns ``exp(-87)``.
        """
        x = max(x, np.float32(-87.0))
        n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
        r = x - n * np.float32(0.693359375)
        r = r - n * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        e = p * (r * r) + r + np.float32(1.0)
        return e * _bits_to_f32((np.int32(n) + np.int32(127)) << np.int32(23))

    @_jit
    def expf_array(x, out):  # pragma: no cover - compiled
        """``out[i] = exp(x[i])`` by :func:`_expf` (for its accuracy test)."""
        for i in range(x.shape[0]):
            out[i] = _expf(x[i])

    @_jit
    def _residual_rows(Z, nr, y, xn, a, tau, ce, loss, E):  # pragma: no cover - compiled
        """In place: logits Z[r] -> c_r (p_r - y_r) for the nr rows starting at a (also into E's
        rows a.. where E has rows: the owner's-view residual output)."""
        C = Z.shape[1]
        for r in range(nr):
            m = Z[r, 0]
            for c in range(1, C):
                m = max(m, Z[r, c])
            loss[a + r] = np.float64(m) - Z[r, y[a + r]]  # -(z_y - max), log-sum-exp added below
            for c in range(C):
                Z[r, c] -= m
        Zf = Z.reshape(-1)
        for i in range(nr * C):  # one vectorized loop over the nr x C shifted logits (all <= 0)
            Zf[i] = _expf(Zf[i])
        for r in range(nr):
            yi = y[a + r]
            s = np.float32(0.0)
            for c in range(C):
                s += Z[r, c]
            loss[a + r] += np.log(np.float64(s))  # -log p_y = log sum exp(z - max) - (z_y - max)
            inv = np.float32(1.0) / s  # one division per row, then products
            for c in range(C):
                Z[r, c] *= inv
            # p_y - 1 = -(sum of the other p_c): exact where p_y ~ 1, where p_y - 1 in float32 is
            # rounded to 1's ulp (6e-8) and swamps the other residuals
            t = 0.0
            for c in range(C):
                if c != yi:
                    t += np.float64(Z[r, c])
            Z[r, yi] = np.float32(-t)
            # the release sums the first C - 1 columns and gives the last minus their sum
            # (clipped_sum's PARTIAL_ROWS flush): the norm that is clipped must be that column's.
            # In float32 p - y does not sum to 0 when p_y ~ 1 (p_y - 1 is rounded to 1's ulp),
            # and a row clipped to tau = 1e-6 moved the release by 1.006 tau (1.3 tau in a run).
            t = 0.0
            for c in range(C - 1):
                t += np.float64(Z[r, c])
            Z[r, C - 1] = np.float32(-t)
            en = np.float32(0.0)  # sum of C squares <= 2 in float32 (a few ulp), then float64
            for c in range(C):
                en += Z[r, c] * Z[r, c]
            en = np.sqrt(np.float64(en))
            g = xn[a + r] * en  # ||g_i||_F
            cf = 1.0
            if g > tau:
                cf = tau / g
            cf32 = np.float32(cf)
            for c in range(C):
                Z[r, c] *= cf32
            ce[a + r] = cf * en
            if E.shape[0] > 0:
                for c in range(C):
                    E[a + r, c] = Z[r, c]

    @_jit
    def clipped_sum(X, y, VT, xn, tau, lo, hi, S, ce, loss, off, E):  # pragma: no cover - compiled
        """Add ``sum_{lo <= i < hi} c_i x_i (p_i - y_i)^T`` (transposed, ``(C, D)``) to ``S``.

        Args:
            X: ``(N, D)`` float32, C-contiguous rows.
            y: ``(N,)`` int64 labels.
            VT: ``(C - 1, D)`` float32, ``(W_c - W_{C-1})^T`` for ``c < C - 1`` (see
                :func:`shifted_weights`): the logits relative to the last class.
            xn: ``(N,)`` float64 row norms ``||x_i||``.
            tau: clip threshold (> 0).
            lo, hi: row range.
            S: ``(C, D)`` float64 accumulator (added to).
            ce: ``(N,)`` float64, receives ``c_i ||p_i - y_i||`` on ``lo .. hi-1``.
            loss: ``(N,)`` float64, receives ``-log p_{i, y_i}`` (nats) on ``lo .. hi-1``.
            off: ``(C - 1,)`` float32 logit offsets relative to the last class, ``b_c - b_{C-1}``
                (zeros: plain softmax).
            E: ``(N, C)`` float64 receiving ``c_i (p_i - y_i)`` on ``lo .. hi-1``, or ``(0, C)``
                to skip it.
        """
        D = X.shape[1]
        Cm = VT.shape[0]
        C = Cm + 1
        Z = np.empty((4, C), np.float32)
        P = np.zeros((Cm, D), np.float32)  # float32 partial sum over <= PARTIAL_ROWS rows
        since = 0
        a = lo
        while a < hi:
            nr = min(4, hi - a)
            # --- forward: z_ic = x_i . (w_c - w_{C-1}) for c < C-1, z_{i,C-1} = 0 ---
            if nr == 4:
                x0 = X[a]
                x1 = X[a + 1]
                x2 = X[a + 2]
                x3 = X[a + 3]
                c = 0
                while c + 2 < Cm:
                    r3 = _dot4x3(x0, x1, x2, x3, VT[c], VT[c + 1], VT[c + 2], D)
                    for k in range(3):
                        Z[0, c + k] = r3[k]
                        Z[1, c + k] = r3[3 + k]
                        Z[2, c + k] = r3[6 + k]
                        Z[3, c + k] = r3[9 + k]
                    c += 3
                while c < Cm:  # 1 or 2 classes left
                    c1 = c + 1 if c + 1 < Cm else c
                    r = _dot4x2(x0, x1, x2, x3, VT[c], VT[c1], D)
                    Z[0, c] = r[0]
                    Z[1, c] = r[2]
                    Z[2, c] = r[4]
                    Z[3, c] = r[6]
                    Z[0, c1] = r[1]
                    Z[1, c1] = r[3]
                    Z[2, c1] = r[5]
                    Z[3, c1] = r[7]
                    c += 2
            else:
                for r_ in range(nr):
                    xr = X[a + r_]
                    for c in range(Cm):
                        w = VT[c]
                        t = np.float32(0.0)
                        for d in range(D):
                            t += xr[d] * w[d]
                        Z[r_, c] = t
            for r_ in range(nr):
                for c in range(Cm):
                    Z[r_, c] += off[c]
                Z[r_, Cm] = 0.0
            _residual_rows(Z, nr, y, xn, a, tau, ce, loss, E)
            # --- backward: P[c] += sum_r e_rc x_r for c < C-1 (column C-1 from the zero sum) ---
            if nr == 4:
                x0 = X[a]
                x1 = X[a + 1]
                x2 = X[a + 2]
                x3 = X[a + 3]
                c = 0
                while c + 1 < Cm:
                    s0 = P[c]
                    s1 = P[c + 1]
                    e00 = Z[0, c]
                    e10 = Z[1, c]
                    e20 = Z[2, c]
                    e30 = Z[3, c]
                    e01 = Z[0, c + 1]
                    e11 = Z[1, c + 1]
                    e21 = Z[2, c + 1]
                    e31 = Z[3, c + 1]
                    for d in range(D):
                        p = x0[d]
                        q = x1[d]
                        u = x2[d]
                        v = x3[d]
                        s0[d] += e00 * p + e10 * q + e20 * u + e30 * v
                        s1[d] += e01 * p + e11 * q + e21 * u + e31 * v
                    c += 2
                if c < Cm:
                    s0 = P[c]
                    e00 = Z[0, c]
                    e10 = Z[1, c]
                    e20 = Z[2, c]
                    e30 = Z[3, c]
                    for d in range(D):
                        s0[d] += e00 * x0[d] + e10 * x1[d] + e20 * x2[d] + e30 * x3[d]
            else:
                for c in range(Cm):
                    s0 = P[c]
                    for r_ in range(nr):
                        e = Z[r_, c]
                        xr = X[a + r_]
                        for d in range(D):
                            s0[d] += e * xr[d]
            a += nr
            since += nr
            if since >= 512 or a >= hi:  # PARTIAL_ROWS
                for c in range(Cm):
                    for d in range(D):
                        v = np.float64(P[c, d])
                        S[c, d] += v
                        S[Cm, d] -= v  # sum_c (p_ic - y_ic) = 0 for every row
                        P[c, d] = 0.0
                since = 0

    @_jit
    def row_sq_norms(A, MT, lo, hi, out):  # pragma: no cover - compiled
        """``out[i - lo] = ||A_i M||^2`` (float64) for ``lo <= i < hi``; ``MT`` is ``M^T`` (``(k, m)``).

        The projection norms of the pDP ratio: ``||U^T x_i||^2`` from the cached products of
        ``X`` with public-data-dependent bases (``A = X Q_p`` or ``[X B | X Q_p]``, a few dozen
        columns), without an ``N x k`` temporary. 4 rows x 2 columns of ``M`` per pass
        (:func:`_dot4x2`: 8 independent accumulators instead of 4 with one column at a time):
        50,000 x 80 by 80 x 30 in 0.21-0.22 of a stream pass over ``X`` vs 0.235-0.26 one
        column at a time (side by side, load ~4; ``benchmarks/train.py``,
        ``pdp_norms_over_stream``).
        """
        k = MT.shape[0]
        m = A.shape[1]
        i = lo
        while i + 3 < hi:
            a0 = A[i]
            a1 = A[i + 1]
            a2 = A[i + 2]
            a3 = A[i + 3]
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            j = 0
            while j < k:
                j1 = j + 1 if j + 1 < k else j
                r = _dot4x2(a0, a1, a2, a3, MT[j], MT[j1], m)
                s0 += np.float64(r[0]) * r[0]
                s1 += np.float64(r[2]) * r[2]
                s2 += np.float64(r[4]) * r[4]
                s3 += np.float64(r[6]) * r[6]
                if j1 != j:
                    s0 += np.float64(r[1]) * r[1]
                    s1 += np.float64(r[3]) * r[3]
                    s2 += np.float64(r[5]) * r[5]
                    s3 += np.float64(r[7]) * r[7]
                j += 2
            out[i - lo] = s0
            out[i - lo + 1] = s1
            out[i - lo + 2] = s2
            out[i - lo + 3] = s3
            i += 4
        while i < hi:
            a = A[i]
            s = 0.0
            for j in range(k):
                w = MT[j]
                t = np.float32(0.0)
                for q in range(m):
                    t += a[q] * w[q]
                s += np.float64(t) * t
            out[i - lo] = s
            i += 1


    @_numba.njit(fastmath=True, cache=True, boundscheck=False, nogil=True, inline="always")
    def _sq4(a0, a1, a2, a3, MT, D, acc):  # pragma: no cover - compiled
        # acc[0..3] += ||a_q M||^2 for the 4 rows: 3 columns of M per pass (12 accumulators,
        # :func:`_dot4x3`), the last 1-2 columns 2 at a time
        k = MT.shape[0]
        j = 0
        while j + 2 < k:
            r = _dot4x3(a0, a1, a2, a3, MT[j], MT[j + 1], MT[j + 2], D)
            for q in range(4):
                acc[q] += (np.float64(r[3 * q]) * r[3 * q] + np.float64(r[3 * q + 1]) * r[3 * q + 1]
                           + np.float64(r[3 * q + 2]) * r[3 * q + 2])
            j += 3
        while j < k:
            j1 = j + 1 if j + 1 < k else j
            r = _dot4x2(a0, a1, a2, a3, MT[j], MT[j1], D)
            for q in range(4):
                acc[q] += np.float64(r[2 * q]) * r[2 * q]
                if j1 != j:
                    acc[q] += np.float64(r[2 * q + 1]) * r[2 * q + 1]
            j += 2

    @_jit
    def sq_norms_lowrank(A, M1T, off, M2T, base, lo, hi, out):  # pragma: no cover - compiled
        """``out[i - lo] = max(0, base[i] - ||A_i M_1||^2 + ||A_i[off:] M_2||^2)`` (float64).

        AdaMix's ``complement`` projection norm ``||U^T x_i||^2`` from the cached
        ``A = [X B | X Q_p]`` (see :func:`.numba_backend.complement_maps`): ``base = ||x||^2 -
        ||P_B x||^2`` is fixed for a run, ``M_1`` (``(m + n_pub) x r``) and ``M_2 = coef``
        (``n_pub x r``) change with the step, ``r <= C - 1``: ``r (m + 2 n_pub)``
        multiply-adds per row instead of ``m (m + n_pub)`` for ``Q^T x``. 4 rows x 3 columns
        per pass (:func:`_sq4`). Measured (50,000 rows, m = 30, n_pub = 50, r = 9, 1 thread,
        side by side, medians / minima of 11-15 interleaved rounds, load ~4): 0.14-0.15 /
        0.13-0.145 of a stream pass over the 50,000 x 1,280 ``X``, vs 0.26 / 0.20 for
        :func:`row_sq_norms` with the dense 80 x 30 map of ``X Q``, 0.22 / 0.18 for the same
        low-rank maps by BLAS on 4,096-row blocks, 0.19 / 0.14 with 4 x 2 blocks; a first
        version through the ``Q^T x = R^{-T} (b - K u)`` Woodbury form with the ``O(r^2)``
        float64 work per row was slower (0.28-0.45).
        """
        D1 = A.shape[1]
        D2 = D1 - off
        acc = np.zeros(4)
        i = lo
        while i + 3 < hi:
            a0 = A[i]
            a1 = A[i + 1]
            a2 = A[i + 2]
            a3 = A[i + 3]
            acc[:] = 0.0
            _sq4(a0, a1, a2, a3, M1T, D1, acc)
            for q in range(4):
                acc[q] = -acc[q]
            _sq4(a0[off:], a1[off:], a2[off:], a3[off:], M2T, D2, acc)
            for q in range(4):
                v = base[i + q] + acc[q]
                out[i - lo + q] = v if v > 0.0 else 0.0
            i += 4
        while i < hi:
            a = A[i]
            s = 0.0
            for j in range(M1T.shape[0]):
                t = np.float32(0.0)
                for q in range(D1):
                    t += a[q] * M1T[j, q]
                s -= np.float64(t) * t
            for j in range(M2T.shape[0]):
                t = np.float32(0.0)
                for q in range(D2):
                    t += a[off + q] * M2T[j, q]
                s += np.float64(t) * t
            v = base[i] + s
            out[i - lo] = v if v > 0.0 else 0.0
            i += 1
