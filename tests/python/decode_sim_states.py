"""Decodes SimStateData buffers with the public `tminterface` package (the
independent reference for rulka's decoder; used only as a pip-installed
checker at test time).

Input: a file of records, each a little-endian u32 length and that many bytes.
Output: one JSON line per record with the fields rulka decodes; floats as the
bit pattern of their double value (exact, NaN-safe).

The variable checkpoint arrays are read as tminterface's own client reads them
from its stream: the fixed 8356 bytes, then `cp_data.read_from_file`.
"""
import io
import json
import struct
import sys

from tminterface.structs import SimStateData

FIXED = 8356


def fbits(x):
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def main(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        i += 4
        buf = data[i : i + n]
        i += n
        s = SimStateData(bytes(buf[:FIXED]))
        s.cp_data.read_from_file(io.BytesIO(bytes(buf[FIXED:])))
        cur = s.dyna.current_state
        mobil = s.scene_mobil
        wheels = []
        for k in range(4):
            rt = s.simulation_wheels[k].real_time_state
            wheels.append(
                {
                    "damper_absorb": fbits(rt.damper_absorb),
                    "has_ground_contact": bool(rt.has_ground_contact),
                    "contact_material_id": int(rt.contact_material_id),
                    "is_sliding": bool(rt.is_sliding),
                }
            )
        out = {
            "version": int(s.version),
            "context_mode": int(s.context_mode),
            "flags": int(s.flags),
            "rotation": [[fbits(x) for x in row] for row in cur.rotation.to_numpy().tolist()],
            "position": [fbits(x) for x in cur.position],
            "linear_speed": [fbits(x) for x in cur.linear_speed],
            "angular_speed": [fbits(x) for x in cur.angular_speed],
            "gearbox_state": int(mobil.gearbox_state),
            "actual_rpm": fbits(mobil.engine.actual_rpm),
            "gear": int(mobil.engine.gear),
            "is_freewheeling": bool(mobil.is_freewheeling),
            "wheels": wheels,
            "race_time": int(s.race_time),
            "cp_states": [bool(x) for x in s.cp_data.cp_states],
            "cp_times": [[int(t.time), int(t.stunts_score)] for t in s.cp_data.cp_times],
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
