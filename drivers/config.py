"""Driver config models: which device, where, and how it is set up (pydantic, strict, frozen).

Each model names its driver and emulator (``driver`` / ``emulator``, ``"module:Class"``,
imported on use by drivers/registry.py) and :data:`KINDS` lists the models of
each device kind: a model plus its line in :data:`KINDS` is the whole registry
entry of a driver. ``agent.config.drivers`` builds the ``drivers`` section from it.

Transports are chosen by value, pyserial-``serial_for_url`` style:

- serial ``port``: a device path (``/dev/ttyACM0``, ``/dev/serial/by-id/...``), a
  pyserial URL (``loop://``, ``socket://``) or a URL whose scheme has a registered
  opener (``sim://``: the simulated tank's emulator, drivers/transport.py);
- I2C ``bus``: a bus number (``1`` -> ``/dev/i2c-1``), a path, or a registered URL (``sim://``);
- GPIO ``chip``: a chip number (``0`` -> ``/dev/gpiochip0``), a name (``gpiochip0``), a path, or
  a registered URL (``sim://``: the simulated tank's GPIO chip);
- camera ``source``: an index, ``/dev/videoN``, ``/dev/v4l/by-id/...``,
  ``gst:<pipeline>``, ``picam:<N>``, a file path or URL, or ``sim://pattern``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from drivers.section import AngleRad, Address, Baud, DriverSection, I2cBus, RateHz
from drivers.transport import url_scheme


class RoboclawConfig(DriverSection):
    """Basicmicro RoboClaw in packet serial (hardware-reference §1)."""

    driver: ClassVar[str] = "drivers.roboclaw:Roboclaw"
    emulator: ClassVar[str] = "drivers.emulators.roboclaw:RoboclawEmulator"
    transport: ClassVar[str] = "serial"

    kind: Literal["roboclaw"]
    port: str
    baud: Baud = 38400
    address: Address = Field(0x80, ge=0x80, le=0x87)
    serial_timeout_s: float = Field(0.5, ge=0.1, le=25.5, description="controller's own stop timeout (cmd 14)")
    status_bytes: Literal[2, 4] = 4
    left_channel: Literal[1, 2] = 1
    invert_left: bool = False
    invert_right: bool = False
    reply_timeout_s: float = Field(0.05, ge=0.005, le=2.0, description="wait for an ack/reply before retrying")
    feedback_hz: RateHz = Field(20.0, le=500, description="feedback sets per second (encoders, speeds and one of battery/currents/status)")


class SabertoothConfig(DriverSection):
    """Dimension Engineering Sabertooth in packetized serial (hardware-reference §2). One-way link."""

    driver: ClassVar[str] = "drivers.sabertooth:Sabertooth"
    emulator: ClassVar[str] = "drivers.emulators.sabertooth:SabertoothEmulator"
    transport: ClassVar[str] = "serial"

    kind: Literal["sabertooth"]
    port: str
    baud: Baud = 9600
    address: Address = Field(128, ge=128, le=135)
    serial_timeout_s: float = Field(0.5, ge=0.1, le=12.7, description="controller's own stop timeout (cmd 14)")
    autobaud: bool = True
    autobaud_wait_s: float = Field(0.5, ge=0.0, le=5.0, description="pause after the 0xAA autobaud byte (DE library: 500 ms)")
    left_channel: Literal[1, 2] = 1
    invert_left: bool = False
    invert_right: bool = False


class LineMotorConfig(DriverSection):
    """Arduino-class firmware speaking the ASCII line protocol (docs/line-protocol.md)."""

    driver: ClassVar[str] = "drivers.linemotor:LineMotor"
    emulator: ClassVar[str] = "drivers.emulators.linemotor:LineMotorEmulator"
    transport: ClassVar[str] = "serial"

    kind: Literal["line"]
    port: str
    baud: Baud = 115200
    firmware_timeout_s: float = Field(0.5, ge=0.1, le=5.0, description="firmware watchdog (T command)")
    max_pwm: int = Field(255, ge=1, le=255)
    checksum: bool = True
    ready_timeout_s: float = Field(3.0, ge=0.0, le=10.0)
    invert_left: bool = False
    invert_right: bool = False
    reply_timeout_s: float = Field(0.05, ge=0.005, le=2.0, description="wait for a reply line before retrying")
    feedback_hz: RateHz = Field(20.0, le=500, description="encoder/status reads per second")


class Mpu6050Config(DriverSection):
    """InvenSense MPU-6050 (hardware-reference §3); orientation from an AHRS filter library."""

    driver: ClassVar[str] = "drivers.mpu6050:Mpu6050"
    emulator: ClassVar[str] = "drivers.emulators.mpu6050:Mpu6050Chip"
    transport: ClassVar[str] = "i2c"

    kind: Literal["mpu6050"]
    bus: I2cBus = 1
    address: Address = Field(0x68, ge=0x68, le=0x69)
    accel_range_g: Literal[2, 4, 8, 16] = 2
    gyro_range_dps: Literal[250, 500, 1000, 2000] = 250
    dlpf_cfg: int = Field(3, ge=0, le=6)
    sample_rate_div: int = Field(9, ge=0, le=255)
    rate_hz: RateHz = Field(100.0, le=1000)


class Bno055Config(DriverSection):
    """Bosch BNO055 in NDOF fusion mode (hardware-reference §4)."""

    driver: ClassVar[str] = "drivers.bno055:Bno055"
    emulator: ClassVar[str] = "drivers.emulators.bno055:Bno055Chip"
    transport: ClassVar[str] = "i2c"

    kind: Literal["bno055"]
    bus: I2cBus = 1
    address: Address = Field(0x28, ge=0x28, le=0x29)
    rate_hz: RateHz = Field(100.0, le=100)


class BatteryConfig(DriverSection):
    """Battery pack for the percentage estimate: chemistry and cells in series."""

    chemistry: Literal["lipo", "liion", "lifepo4", "lead_acid"] = "lipo"
    cells: int = Field(3, ge=1, le=24)


class Ina219Config(DriverSection):
    """TI INA219 (hardware-reference §5)."""

    driver: ClassVar[str] = "drivers.ina2xx:Ina219"
    emulator: ClassVar[str] = "drivers.emulators.ina2xx:Ina219Chip"
    transport: ClassVar[str] = "i2c"

    kind: Literal["ina219"]
    bus: I2cBus = 1
    address: Address = Field(0x40, ge=0x40, le=0x4F)
    shunt_ohm: float = Field(0.1, ge=1e-4, le=100.0)
    max_current_a: float = Field(3.2, ge=0.01, le=1000.0)
    battery: BatteryConfig = Field(default_factory=BatteryConfig)
    rate_hz: RateHz = Field(2.0, le=200)    # a battery moves slowly: each read is 5 transactions


class Ina226Config(DriverSection):
    """TI INA226 (hardware-reference §5.5)."""

    driver: ClassVar[str] = "drivers.ina2xx:Ina226"
    emulator: ClassVar[str] = "drivers.emulators.ina2xx:Ina226Chip"
    transport: ClassVar[str] = "i2c"

    kind: Literal["ina226"]
    bus: I2cBus = 1
    address: Address = Field(0x40, ge=0x40, le=0x4F)
    shunt_ohm: float = Field(0.002, ge=1e-4, le=100.0)
    max_current_a: float = Field(20.0, ge=0.01, le=1000.0)
    battery: BatteryConfig = Field(default_factory=BatteryConfig)
    rate_hz: RateHz = Field(2.0, le=200)    # a battery moves slowly: each read is 5 transactions


class ServoJointConfig(DriverSection):
    """One servo joint: channel, pulse range mapped linearly onto the angle range.

    Attributes:
        min_us / max_us: pulse at ``min_rad`` / ``max_rad``, microseconds.
        home_rad: angle at start and after ``reset``.
        max_speed_radps: slew limit applied by the control loop.
    """

    name: str = Field(min_length=1, max_length=64)
    channel: int = Field(ge=0, le=15)
    min_us: float = Field(500.0, ge=100, le=3000)
    max_us: float = Field(2500.0, ge=100, le=3000)
    min_rad: AngleRad = -1.5708
    max_rad: AngleRad = 1.5708
    home_rad: AngleRad = 0.0
    max_speed_radps: float = Field(3.0, ge=0.01, le=50)

    @model_validator(mode="after")
    def _ranges(self) -> "ServoJointConfig":
        if self.min_rad >= self.max_rad:
            raise ValueError(f"min_rad {self.min_rad} must be below max_rad {self.max_rad}")
        if not self.min_rad <= self.home_rad <= self.max_rad:
            raise ValueError(f"home_rad {self.home_rad} is outside {self.min_rad}..{self.max_rad}")
        return self


class GripperConfig(DriverSection):
    """Gripper servo: 0 = closed pulse, 1 = open pulse."""

    channel: int = Field(ge=0, le=15)
    closed_us: float = Field(1000.0, ge=100, le=3000)
    open_us: float = Field(2000.0, ge=100, le=3000)
    home_fraction: float = Field(1.0, ge=0.0, le=1.0)


class Pca9685Config(DriverSection):
    """NXP PCA9685 servo PWM chip (hardware-reference §6)."""

    driver: ClassVar[str] = "drivers.pca9685:Pca9685"
    emulator: ClassVar[str] = "drivers.emulators.pca9685:Pca9685Chip"
    transport: ClassVar[str] = "i2c"

    kind: Literal["pca9685"]
    bus: I2cBus = 1
    address: Address = Field(0x40, ge=0x40, le=0x7F)
    frequency_hz: float = Field(50.0, ge=24, le=1526)
    oscillator_hz: float = Field(25_000_000.0, ge=20e6, le=30e6)
    joints: list[ServoJointConfig] = Field(default_factory=list, max_length=16)
    gripper: GripperConfig | None = None

    @model_validator(mode="after")
    def _channels(self) -> "Pca9685Config":
        used = [j.channel for j in self.joints] + ([self.gripper.channel] if self.gripper else [])
        if len(used) != len(set(used)):
            raise ValueError(f"servo channels used twice: {sorted(used)}")
        names = [j.name for j in self.joints]
        if len(names) != len(set(names)):
            raise ValueError(f"joint names used twice: {names}")
        return self


class CameraConfig(DriverSection):
    """One camera through OpenCV.

    Attributes:
        id: name used by every protocol (ARTEX video key, Sim2Bot ``model:<i>`` label).
        source: index, device path, ``gst:<pipeline>``, ``picam:<N>`` (Pi camera module through
            Picamera2), file/URL or ``sim://pattern``.
        fourcc: e.g. ``MJPG``; "" keeps the device default.
        buffer_size: V4L2 buffers, 1..10 (1-2 lowest latency).
        jpeg_quality: default JPEG quality, 1..100.
        stale_s: a frame unchanged or not arriving for this long reopens the camera, s.
    """

    driver: ClassVar[str] = "drivers.camera:Camera"
    emulator: ClassVar[str] = "drivers.emulators.camera:PatternCapture"

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    source: Union[int, str]
    width: int = Field(640, ge=16, le=4096)
    height: int = Field(480, ge=16, le=4096)
    fps: float = Field(30.0, ge=1.0, le=120)
    fourcc: str = Field("MJPG", max_length=4)
    buffer_size: int = Field(1, ge=1, le=10)
    jpeg_quality: int = Field(80, ge=1, le=100)
    stale_s: float = Field(0.5, gt=0.05, le=30)

    #: URL schemes a string ``source`` may carry; a source without one is a device or file path.
    SOURCE_SCHEMES: ClassVar[tuple[str, ...]] = (
        "gst", "sim", "picam", "http", "https", "rtsp", "rtsps", "rtmp", "udp", "tcp")

    @staticmethod
    def source_scheme(source: int | str) -> str:
        """``"gst"`` for ``gst:<pipeline>``, ``"rtsp"`` for ``rtsp://...``; "" for an index or a path."""
        return url_scheme(source)

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"camera index must be >= 0, got {value}")
            return value
        value = value.strip()
        if not value:
            raise ValueError("camera source is empty")
        scheme = cls.source_scheme(value)
        if scheme and scheme not in cls.SOURCE_SCHEMES:
            raise ValueError(f"unknown camera source scheme {scheme!r}; known: {', '.join(cls.SOURCE_SCHEMES)}")
        if scheme == "picam" and not value[len("picam:"):].strip().isdigit():
            raise ValueError(f"a Pi camera source is picam:<camera number> (picam:0), got {value!r}")
        return value

    @field_validator("fourcc")
    @classmethod
    def _four_characters(cls, value: str) -> str:
        if value and len(value) != 4:
            raise ValueError(f"fourcc must be 4 characters (e.g. MJPG) or empty, got {value!r}")
        return value


class GpioEstopConfig(DriverSection):
    """A normally-closed e-stop switch on one GPIO line, read through the Linux GPIO character
    device with libgpiod v2 (drivers/gpio.py; docs/hardware.md "E-stop input").

    Attributes:
        chip: GPIO chip: number, ``gpiochipN``, a path (``/dev/gpiochip0``) or ``sim://``.
        line: line offset on the chip (``17``) or its name (``"GPIO17"`` on a Raspberry Pi).
        bias: the line's internal bias; must not pull toward the closed level.
        closed_level: the level the line reads while the circuit is closed (``low``: the switch
            connects the line to GND, the pull-up lifts it when the circuit opens).
        debounce_s: the circuit must read closed this long without a break before the input
            releases its e-stop, s, at least 0.05 (a contact bounces for some milliseconds);
            opening sets the e-stop at once.
        poll_hz: reads per second with ``edge_events`` off (the e-stop's reaction is one poll period).
        edge_poll_hz: reads per second besides edge events with ``edge_events`` on: an opening wakes the
            watch at once through its edge; these reads notice a removed chip (a kernel that does not
            wake the waiter on removal) within ``1 / edge_poll_hz`` s.
        edge_events: wake on the line's edges (kernel edge detection) instead of polling only
            (a JSON boolean: ``"false"`` or ``0`` is refused).
    """

    driver: ClassVar[str] = "drivers.gpio:GpioSwitch"
    emulator: ClassVar[str] = "drivers.emulators.gpio:GpioChipEmulator"
    transport: ClassVar[str] = "gpio"

    kind: Literal["gpio"]
    chip: Union[int, str] = "/dev/gpiochip0"
    line: Union[int, str]
    bias: Literal["pull_up", "pull_down", "disabled", "as_is"] = "pull_up"
    closed_level: Literal["low", "high"] = "low"
    debounce_s: float = Field(0.3, ge=0.05, le=10.0)
    poll_hz: RateHz = Field(100.0, le=1000)
    edge_poll_hz: RateHz = Field(20.0, le=1000)
    edge_events: bool = True

    @field_validator("chip", "line", mode="before")
    @classmethod
    def _not_bool(cls, value: Any, info: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{info.field_name} must be a number or a name, got a boolean")
        return value

    @field_validator("chip")
    @classmethod
    def _chip(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if not 0 <= value <= 1023:
                raise ValueError(f"chip number must be 0..1023, got {value}")
            return value
        value = value.strip()
        if not value:
            raise ValueError("chip is empty: give a number (0), gpiochip0, /dev/gpiochip0 or sim://")
        return value

    @field_validator("line")
    @classmethod
    def _line(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if not 0 <= value <= 1023:
                raise ValueError(f"line offset must be 0..1023, got {value}")
            return value
        value = value.strip()
        if not value or len(value) > 32:
            raise ValueError(f"line name must be 1..32 characters (e.g. GPIO17), got {value[:40]!r}")
        return value

    @model_validator(mode="after")
    def _fails_safe(self) -> "GpioEstopConfig":
        pulls_to = {"pull_up": "high", "pull_down": "low"}.get(self.bias)
        if pulls_to == self.closed_level:
            raise ValueError(
                f"bias {self.bias} pulls the line {pulls_to}, the level of a closed circuit: an open or "
                f"broken wire would read closed and never set the e-stop; use "
                f"bias {'pull_up' if self.closed_level == 'low' else 'pull_down'} (or an external resistor "
                "with bias disabled)")
        return self


#: Device kind -> config models of its drivers (each names its driver and emulator).
#: Adding a driver: its module, its emulator, its model here and one entry in this table.
KINDS: dict[str, tuple[type[DriverSection], ...]] = {
    "motor": (RoboclawConfig, SabertoothConfig, LineMotorConfig),
    "imu": (Mpu6050Config, Bno055Config),
    "power": (Ina219Config, Ina226Config),
    "servo": (Pca9685Config,),
    "camera": (CameraConfig,),
    "estop": (GpioEstopConfig,),
}
