#!/usr/bin/python3
"""torch_to_tidal.py: import a reference DiT checkpoint (PyTorch .pt) as a tidal weights file.

    /usr/bin/python3 tools/torch_to_tidal.py FILE.pt --out MODEL.h5 [--use ema|model]
        [--model NAME] [--heads H] [--classes N] [--objective ddpm|rf] [--tidal PATH]

FILE.pt is what facebookresearch/DiT writes: its train.py's {"model", "ema", "opt", "args"}
(the EMA is taken by default; --use model takes the other), or a bare state_dict such as the
published DiT-XL-2-256x256.pt. The file is read without running any code it may hold: first
with torch.load(weights_only=True); a train.py checkpoint, whose args are an argparse.Namespace
that weights_only refuses, then with an unpickler that allows only the globals a DiT
checkpoint needs (torch's tensor rebuild functions, storages and dtypes, OrderedDict,
argparse.Namespace) and refuses any other, naming it. The chosen state_dict is written as a
temporary safetensors file (by the format's specification) beside --out, `tidal ckpt import`
reads it (every name and shape checked, the configuration taken from the shapes, the heads from
--model, args.model, or the reference's sizes; doc/checkpoint.md), and it is removed.

Needs torch (Debian's /usr/bin/python3 has it). The tidal program: --tidal, else $TIDAL, else
`tidal` on PATH. Exit status: 0 success, 1 the file cannot be imported (the message says why),
2 bad arguments; the status of tidal ckpt import otherwise.
"""

import argparse
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile

PROG = 'torch_to_tidal.py'


class Fail(Exception):
    """A file that cannot be imported: message for the user, exit status 1."""


def restricted_pickle_module(torch):
    """A pickle module for torch.load whose Unpickler resolves only the globals a DiT checkpoint
    holds; any other global (os.system, builtins.eval, ...) raises Fail naming it."""
    import argparse as _argparse
    import collections
    import torch._weights_only_unpickler as wou
    allowed = dict(wou._get_allowed_globals())
    allowed['collections.OrderedDict'] = collections.OrderedDict
    allowed['argparse.Namespace'] = _argparse.Namespace
    dtypes = [getattr(torch, n) for n in ('bfloat16', 'float16', 'float32', 'float64', 'int8',
                                          'int16', 'int32', 'int64', 'uint8', 'bool')]
    for t in dtypes:
        allowed[str(t)] = t

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            key = '%s.%s' % (module, name)
            if key not in allowed:
                raise Fail('the pickle calls %s, which a DiT checkpoint has no use for: refused '
                           '(it could run any code)' % key)
            return allowed[key]

    class Module:
        pass
    m = Module()
    m.Unpickler = Unpickler
    m.load = lambda f, **kw: Unpickler(f, **kw).load()
    m.__name__ = 'restricted_pickle'
    return m


def restricted_load(path, torch):
    """torch.load's own reading of the zip (or legacy) format, with the restricted unpickler.
    torch.load itself cannot be given it: PyTorch 1.13 replaces any pickle_module by pickle
    when weights_only is False, which would run whatever the pickle calls."""
    module = restricted_pickle_module(torch)
    ser = torch.serialization
    if not hasattr(ser, '_load') or not hasattr(ser, '_open_zipfile_reader'):
        raise Fail('this PyTorch (%s) does not offer the reading this tool restricts: use '
                   'PyTorch 1.13 to 2.x' % torch.__version__)
    with open(path, 'rb') as f:
        if ser._is_zipfile(f):
            with ser._open_zipfile_reader(f) as z:
                return ser._load(z, 'cpu', module, encoding='utf-8')
        return ser._legacy_load(f, 'cpu', module, encoding='utf-8')


def load_checkpoint(path, torch):
    if not os.path.isfile(path):
        raise Fail('cannot read %s: %s' % (path, 'no such file' if not os.path.exists(path)
                                                 else 'not a file'))
    with open(path, 'rb') as f:
        magic = f.read(4)
    if not (magic == b'PK\x03\x04' or (len(magic) >= 2 and magic[0] == 0x80 and magic[1] <= 5)):
        raise Fail('%s is not a file torch.save wrote (neither a zip archive nor a pickle)' % path)
    try:
        return torch.load(path, map_location='cpu', weights_only=True), 'weights_only'
    except Fail:
        raise
    except pickle.UnpicklingError:
        pass  # a global weights_only refuses (train.py's args): the restricted unpickler decides
    except Exception as e:  # zip, pickle and storage errors of a cut or damaged file
        raise Fail('%s: cannot read it: truncated or damaged (torch: %s)' %
                   (path, ' '.join(str(e).split())[:300]))
    try:
        return restricted_load(path, torch), 'restricted unpickler'
    except Fail as e:
        raise Fail('%s: %s' % (path, e))
    except Exception as e:
        raise Fail('%s: cannot read it: truncated or damaged (torch: %s)' %
                   (path, ' '.join(str(e).split())[:300]))


def pick_state_dict(obj, path, use, torch):
    """(state_dict, what was taken, model name from args or None)."""
    if not isinstance(obj, dict):
        raise Fail('%s holds a %s, not a state_dict or a dict of them' % (path,
                                                                          type(obj).__name__))
    if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        if use:
            raise Fail('%s is a bare state_dict: it has no %s to take (leave out --use)' %
                       (path, use))
        return obj, 'the state_dict', None
    keys = [k for k in ('ema', 'model') if isinstance(obj.get(k), dict)]
    if not keys:
        if not obj:
            raise Fail('%s holds an empty dict: no tensors' % path)
        raise Fail('%s holds a dict without model or ema (its keys: %s): not a DiT checkpoint' %
                   (path, ', '.join(repr(k) for k in list(obj)[:10])))
    take = use or keys[0]
    if take not in keys:
        raise Fail('%s has no %s (it has %s)' % (path, take, ', '.join(keys)))
    args = obj.get('args')
    name = getattr(args, 'model', None) if args is not None else None
    if isinstance(args, dict):
        name = args.get('model')
    return obj[take], take, name if isinstance(name, str) else None


def write_safetensors(sd, path, torch):
    """The safetensors format: u64 little-endian header length, the JSON header (dtype, shape,
    data_offsets within the data section), padded with spaces to 8 bytes, then the data."""
    names = {torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16',
             torch.float64: 'F64', torch.int64: 'I64', torch.int32: 'I32'}
    header, blobs, offset = {}, [], 0
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            raise Fail('the state_dict entry %s is a %s, not a tensor' % (k, type(v).__name__))
        if v.dtype not in names:
            raise Fail('the tensor %s is of dtype %s, not a weight of a DiT' % (k, v.dtype))
        t = v.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
        header[k] = {'dtype': names[t.dtype], 'shape': list(t.shape),
                     'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if not header:
        raise Fail('the state_dict holds no tensors')
    header['__metadata__'] = {'format': 'pt', 'writer': PROG}
    text = json.dumps(header, separators=(',', ':')).encode('utf-8')
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def find_tidal(explicit):
    for cand in (explicit, os.environ.get('TIDAL'), shutil.which('tidal')):
        if cand:
            if not (os.path.isfile(cand) and os.access(cand, os.X_OK)):
                raise Fail('the tidal program %s is not an executable file' % cand)
            return cand
    raise Fail('cannot find the tidal program: pass --tidal PATH, set $TIDAL or put it on PATH')


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description='Import a reference DiT checkpoint '
                                 '(PyTorch .pt) as a tidal weights file.')
    ap.add_argument('file', metavar='FILE.pt', help="train.py's checkpoint or a state_dict")
    ap.add_argument('--out', required=True, metavar='MODEL.h5', help='weights file to write')
    ap.add_argument('--use', choices=('ema', 'model'),
                    help="which weights of a train.py checkpoint (default: ema, else model)")
    ap.add_argument('--model', metavar='NAME',
                    help='reference configuration (DiT-XL/2 ...); default: the checkpoint\'s '
                    'args.model, else from the shapes')
    ap.add_argument('--heads', type=int, metavar='H', help='attention heads')
    ap.add_argument('--classes', type=int, metavar='N', help='classes (a table without the null '
                    'class row has N rows)')
    ap.add_argument('--objective', choices=('ddpm', 'rf'), default='ddpm',
                    help='what the model predicts (ddpm: the reference\'s)')
    ap.add_argument('--tidal', metavar='PATH', help='the tidal program')
    args = ap.parse_args(argv)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        ap.error('cannot write %s: %s is not a folder' % (args.out, out_dir))
    try:
        tidal = find_tidal(args.tidal)
    except Fail as e:
        ap.error(str(e))
    try:
        import torch
    except ImportError as e:
        raise Fail('needs torch (%s); Debian\'s /usr/bin/python3 has it' % e)

    obj, how = load_checkpoint(args.file, torch)
    sd, taken, name = pick_state_dict(obj, args.file, args.use, torch)
    note = ''
    if name and not args.model:
        # train.py's --model is one of the reference's names; another is none tidal knows
        if re.match(r'^DiT-(S|B|L|XL)/(2|4|8)$', name):
            note = ', model %s from args.model' % name
        else:
            note = ', args.model %s is not a reference configuration (ignored)' % name
            name = None
    model = args.model or name
    print('%s: %s (read with %s): took %s, %d tensors%s' %
          (PROG, args.file, how, taken, len(sd), note))
    fd, tmp = tempfile.mkstemp(prefix='.torch_to_tidal-', suffix='.safetensors', dir=out_dir)
    os.close(fd)
    try:
        try:
            write_safetensors(sd, tmp, torch)
        except OSError as e:
            raise Fail('cannot write %s: %s' % (tmp, e))
        except Fail as e:
            raise Fail('%s (%s): %s' % (args.file, taken, e))
        cmd = [tidal, 'ckpt', 'import', tmp, '--out', args.out, '--objective', args.objective]
        if model:
            cmd += ['--model', model]
        if args.heads is not None:
            cmd += ['--heads', str(args.heads)]
        if args.classes is not None:
            cmd += ['--classes', str(args.classes)]
        # tidal's messages name the file the user gave, not the temporary one
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sys.stdout.write(r.stdout.decode('utf-8', 'replace').replace(tmp, args.file))
        sys.stderr.write(r.stderr.decode('utf-8', 'replace').replace(tmp, args.file))
        return r.returncode
    finally:
        os.unlink(tmp)


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    except Fail as e:
        print('%s: error: %s' % (PROG, e), file=sys.stderr)
        sys.exit(1)
