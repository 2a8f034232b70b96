"""Synthetic media for the interop suite, and sinks that count what was decoded.

The video track draws 320x240 yuv420p frames. The frame's sequence number is written
into the picture as 16 big black/white blocks (one bit each) along the top, so a receiver
can tell exactly which of the sender's frames it decoded (lossy coding keeps 16x16 blocks
of luma 16/235 well apart). The audio sink finds the received tone's frequency with numpy (a
dependency of the suite's matplotlib).
"""
from __future__ import annotations

import asyncio
import collections
import fractions
import math
import time
from array import array
from typing import Optional

import numpy

import av
from aiortc.mediastreams import (
    AUDIO_PTIME,
    MediaStreamError,
    MediaStreamTrack,
    VideoStreamTrack,
)

from waiting import WaitTimeout, await_until

WIDTH, HEIGHT = 320, 240
BITS = 16
BLOCK = 16          # each bit is a BLOCK x BLOCK square in row 0..BLOCK-1
BLACK, WHITE = 16, 235


class SyntheticVideoTrack(VideoStreamTrack):
    """30 fps, WIDTH x HEIGHT, frame index encoded in the top row of blocks."""

    kind = "video"

    def __init__(self, width: int = WIDTH, height: int = HEIGHT) -> None:
        super().__init__()
        self.width, self.height = width, height
        self.frames_sent = 0          # frames handed to the encoder so far
        self._uv = bytes([128]) * ((width // 2) * (height // 2))
        self._background = [bytes([(x + y) % 200 + 28 for x in range(width)]) for y in range(height)]

    def _picture(self, index: int) -> av.VideoFrame:
        w, h = self.width, self.height
        rows = []
        bits = [((index >> (BITS - 1 - b)) & 1) for b in range(BITS)]
        bar = bytearray()
        for b in bits:
            bar += bytes([WHITE if b else BLACK]) * BLOCK
        bar += bytes([128]) * (w - len(bar))
        shift = (index * 4) % w
        for y in range(h):
            if y < BLOCK:
                rows.append(bytes(bar))
            else:
                row = self._background[y]
                rows.append(row[shift:] + row[:shift])  # moving content, so P-frames carry data
        frame = av.VideoFrame(w, h, "yuv420p")
        y_plane = frame.planes[0]
        ls = y_plane.line_size
        if ls == w:
            y_plane.update(b"".join(rows))
        else:
            y_plane.update(b"".join(r + bytes(ls - w) for r in rows))
        for p in (frame.planes[1], frame.planes[2]):
            cw = w // 2
            if p.line_size == cw:
                p.update(self._uv)
            else:
                p.update(b"".join(self._uv[i * cw:(i + 1) * cw] + bytes(p.line_size - cw)
                                  for i in range(h // 2)))
        return frame

    async def recv(self) -> av.VideoFrame:
        pts, time_base = await self.next_timestamp()
        index = self.frames_sent
        frame = self._picture(index & 0xFFFF)
        frame.pts = pts
        frame.time_base = time_base
        self.frames_sent += 1
        return frame


def read_index(frame: av.VideoFrame) -> Optional[int]:
    """The sender's frame index written by SyntheticVideoTrack, or None if unreadable."""
    if frame.width < BITS * BLOCK or frame.height < BLOCK:
        return None
    if frame.format.name not in ("yuv420p", "yuvj420p"):
        frame = frame.reformat(format="yuv420p")
    plane = frame.planes[0]
    data = bytes(plane)
    ls = plane.line_size
    value = 0
    for b in range(BITS):
        total = 0
        n = 0
        for dy in (5, 8, 11):
            row = dy * ls + b * BLOCK
            for dx in (5, 8, 11):
                total += data[row + dx]
                n += 1
        avg = total / n
        if 60 < avg < 190:
            return None  # ambiguous: not our picture
        value = (value << 1) | (1 if avg >= 190 else 0)
    return value


SINE_HZ = 440.0     # SineAudioTrack's default tone (AudioSink.tone_problem checks it arrived)


class SineAudioTrack(MediaStreamTrack):
    """A 440 Hz sine, 48 kHz mono s16, 20 ms frames, paced in real time."""

    kind = "audio"

    def __init__(self, frequency: float = SINE_HZ, amplitude: int = 8000) -> None:
        super().__init__()
        self.frequency = frequency
        self.amplitude = amplitude
        self.frames_sent = 0
        self._start: Optional[float] = None
        self._timestamp = 0
        self.sample_rate = 48000
        self.samples = int(AUDIO_PTIME * self.sample_rate)

    def _pcm(self, t0: int) -> bytes:
        """The frame starting at sample `t0` (s16 mono); subclasses shape it."""
        k = 2 * math.pi * self.frequency / self.sample_rate
        return array("h", (int(self.amplitude * math.sin(k * (t0 + i))) for i in range(self.samples))).tobytes()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.time()
            self._timestamp = 0
        else:
            self._timestamp += self.samples
            wait = self._start + (self._timestamp / self.sample_rate) - time.time()
            if wait > 0:
                await asyncio.sleep(wait)     # pacing: the audio clock (20 ms frames in real time)
        t0 = self._timestamp
        frame = av.AudioFrame(format="s16", layout="mono", samples=self.samples)
        frame.planes[0].update(self._pcm(t0))
        frame.pts = t0
        frame.sample_rate = self.sample_rate
        frame.time_base = fractions.Fraction(1, self.sample_rate)
        self.frames_sent += 1
        return frame


class ScheduledToneTrack(SineAudioTrack):
    """Speech-like audio on a schedule: tone bursts with a syllable-rate envelope (about -15 to
    -20 dBov) during the `schedule`'s intervals (seconds after `clock["t0"]`, a `time.monotonic()`
    value the test sets once every publisher is connected), digital silence otherwise (aiortc
    puts -127 dBov in the RFC 6464 audio-level extension of each packet). Records when each
    interval's first voiced frame was made (`voiced_at`, monotonic) and how many voiced frames
    were made (`voiced_frames`)."""

    def __init__(self, clock: dict, schedule: list[tuple[float, float]], frequency: float = SINE_HZ) -> None:
        super().__init__(frequency=frequency)
        self.clock = clock
        self.schedule = schedule
        self.voiced_at: dict[int, float] = {}
        self.voiced_frames = 0

    def _interval(self, now: float) -> Optional[int]:
        t0 = self.clock.get("t0")
        if t0 is None:
            return None
        t = now - t0
        return next((i for i, (a, b) in enumerate(self.schedule) if a <= t < b), None)

    def _pcm(self, t0: int) -> bytes:
        now = time.monotonic()
        i = self._interval(now)
        if i is None:
            return numpy.zeros(self.samples, dtype=numpy.int16).tobytes()
        self.voiced_at.setdefault(i, now)
        self.voiced_frames += 1
        n = numpy.arange(t0, t0 + self.samples)
        # Syllables: the amplitude swells and fades four times a second, never below half.
        env = 0.55 + 0.45 * numpy.abs(numpy.sin(2 * math.pi * 2.0 * n / self.sample_rate))
        return (self.amplitude * env * numpy.sin(2 * math.pi * self.frequency * n / self.sample_rate)).astype(numpy.int16).tobytes()


class VideoSink:
    """Consumes a received video track, counting decoded frames and the sender's indices."""

    def __init__(self, track: MediaStreamTrack, name: str = "video") -> None:
        self.track = track
        self.name = name
        self.frames = 0
        self.indices: set[int] = set()
        self.sizes: dict[tuple[int, int], int] = {}
        self.last_frame_at: Optional[float] = None
        self.first_frame_at: Optional[float] = None
        self.last_index: Optional[int] = None   # sender index of the latest readable frame
        self.ended = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while True:
                frame = await self.track.recv()
                self.frames += 1
                self.last_frame_at = time.monotonic()
                if self.first_frame_at is None:
                    self.first_frame_at = self.last_frame_at
                size = (frame.width, frame.height)
                self.sizes[size] = self.sizes.get(size, 0) + 1
                idx = read_index(frame)
                if idx is not None:
                    self.indices.add(idx)
                    self.last_index = idx
        except (MediaStreamError, asyncio.CancelledError):
            pass
        finally:
            self.ended = True

    def decoded_in(self, first: int, last: int) -> int:
        """How many of the sender's frames first..last (inclusive) were decoded here."""
        return sum(1 for i in range(first, last + 1) if (i & 0xFFFF) in self.indices)

    async def wait_frames(self, n: int, timeout: float) -> bool:
        """Waits until `n` frames were decoded; False (the caller's assertion says what) if not
        within `timeout` s."""
        try:
            await await_until(lambda: self.frames >= n, timeout, f"{self.name}: {n} decoded frames")
        except WaitTimeout:
            return False
        return True

    def reached(self, index: int) -> bool:
        """Has a frame with sender index `index` or later (mod 2**16) been decoded?"""
        return self.last_index is not None and ((self.last_index - index) & 0xFFFF) < 0x8000

    def stop(self) -> None:
        self._task.cancel()


class AudioSink:
    """Consumes a received audio track, counting decoded frames and non-silent ones, and keeps
    the last TONE_SECONDS of the first channel to tell which tone it is (`tone()`)."""

    TONE_SECONDS = 1.0

    def __init__(self, track: MediaStreamTrack, name: str = "audio", threshold: int = 500) -> None:
        self.track = track
        self.name = name
        self.threshold = threshold
        self.frames = 0
        self.loud_frames = 0
        self.max_amplitude = 0
        self.sample_rate = 0
        self.ended = False
        self._recent: collections.deque = collections.deque()   # first-channel PCM of the last frames
        self._recent_samples = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while True:
                frame = await self.track.recv()
                self.frames += 1
                if frame.format.name != "s16":
                    frame = frame.reformat(format="s16")
                channels = len(frame.layout.channels)
                pcm = array("h")
                pcm.frombytes(bytes(frame.planes[0])[: frame.samples * channels * 2])
                peak = max((abs(s) for s in pcm), default=0)
                self.max_amplitude = max(self.max_amplitude, peak)
                if peak >= self.threshold:
                    self.loud_frames += 1
                self.sample_rate = frame.sample_rate
                first = numpy.frombuffer(pcm.tobytes(), dtype=numpy.int16)[::channels]
                self._recent.append(first)
                self._recent_samples += len(first)
                while self._recent and self._recent_samples - len(self._recent[0]) >= self.TONE_SECONDS * self.sample_rate:
                    self._recent_samples -= len(self._recent.popleft())
        except (MediaStreamError, asyncio.CancelledError):
            pass
        finally:
            self.ended = True

    def tone(self) -> tuple[float, float]:
        """(frequency in Hz, purity) of the strongest tone in the last TONE_SECONDS received:
        the peak of a Hann-windowed FFT, refined by parabolic interpolation of the log magnitude
        (to well under 1 Hz for a clean sine over 1 s), and the share of the signal's energy
        within 20 Hz of it (a sine: ~1; noise or silence: near 0). (0.0, 0.0) without audio."""
        if not self._recent or not self.sample_rate:
            return 0.0, 0.0
        x = numpy.concatenate(list(self._recent)).astype(numpy.float64)
        x -= x.mean()
        if len(x) < 64 or not numpy.any(x):
            return 0.0, 0.0
        power = numpy.abs(numpy.fft.rfft(x * numpy.hanning(len(x)))) ** 2
        power[0] = 0.0
        k = int(numpy.argmax(power))
        shift = 0.0
        if 0 < k < len(power) - 1:
            a, b, c = numpy.log(power[k - 1:k + 2] + 1e-12)
            if a - 2 * b + c != 0:
                shift = 0.5 * (a - c) / (a - 2 * b + c)
        bin_hz = self.sample_rate / len(x)
        near = max(1, int(20 / bin_hz))
        purity = float(power[max(0, k - near):k + near + 1].sum() / power.sum())
        return float((k + shift) * bin_hz), purity

    def tone_problem(self, frequency: float, tolerance_hz: float = 3.0, min_purity: float = 0.8) -> str:
        """'' when the last TONE_SECONDS carry the sine of `frequency` (within `tolerance_hz`,
        with at least `min_purity` of the energy near it), else what was heard."""
        f, purity = self.tone()
        if abs(f - frequency) > tolerance_hz or purity < min_purity:
            return (f"{self.name}: heard {f:.1f} Hz (purity {purity:.2f}, peak {self.max_amplitude}), not the "
                    f"{frequency:g} Hz sine sent (+-{tolerance_hz:g} Hz, purity >= {min_purity:g})")
        return ""

    def stop(self) -> None:
        self._task.cancel()


async def measure_window(source: SyntheticVideoTrack, sinks: list[VideoSink], window: float = 5.0,
                         settle: float = 1.5) -> dict[str, tuple[int, int]]:
    """Over `window` seconds, which of the frames `source` sent did each sink decode?
    Returns {sink.name: (decoded, sent)}. After the window, waits (up to `settle` s) until every
    sink has decoded the window's last frame or a later one, so frames in flight are counted."""
    first = source.frames_sent
    await asyncio.sleep(window)       # the measurement window itself: the sender keeps its 30 fps pace
    last = source.frames_sent - 1
    try:
        await await_until(lambda: all(s.reached(last & 0xFFFF) for s in sinks), settle,
                          f"every sink to decode frame {last} or later")
    except WaitTimeout:
        pass                          # not a failure here: what a sink missed shows in its count
    return {s.name: (s.decoded_in(first, last), last - first + 1) for s in sinks}
