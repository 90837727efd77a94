#!/usr/bin/env python3
"""Writes llama3-legacy-quants.json: the zoo's llama3 in Q4_1, Q5_0, Q5_1 and
IQ4_NL as llama-quantize writes them (the types of their tensors and a digest
of their bytes) and llama.cpp's greedy tokens for each file.

    make_legacy_references.py LLAMA_BIN ZOO_F32 SHARED OUT.json

LLAMA_BIN: a build of llama.cpp 0c1e570 (llama-cpp-python==0.3.36's
vendor/llama.cpp) with llama-quantize and llama-server; ZOO_F32: the F32
originals (shared/models/zoo/README.md); SHARED: the shared folder, for
reference/zoo.json's llama3 prompts. Needs numpy and gguf==0.19.0. The
requests follow zoo.json's own (its README); run on llama3-Q4_K_M.gguf they
give zoo.json's entry exactly.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import gguf

TYPES = ['Q4_1', 'Q5_0', 'Q5_1', 'IQ4_NL']
PORT = 18432


def post(path, body):
    request = urllib.request.Request(f'http://127.0.0.1:{PORT}{path}', json.dumps(body).encode(),
                                     {'Content-Type': 'application/json'})
    return json.load(urllib.request.urlopen(request))


def greedy_cases(llama_bin, model, prompts):
    env = dict(os.environ, LD_LIBRARY_PATH=llama_bin)
    server = subprocess.Popen([f'{llama_bin}/llama-server', '-m', model, '--port', str(PORT), '-ctk', 'f32', '-ctv',
                               'f32', '-fa', 'off', '-np', '1', '-c', '512'],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f'http://127.0.0.1:{PORT}/health')
                break
            except OSError:
                time.sleep(0.5)
        cases = []
        for prompt in prompts:
            reply = post('/completion', {'prompt': prompt, 'n_predict': 64, 'temperature': 0, 'top_k': 1,
                                         'ignore_eos': True, 'n_probs': 2, 'cache_prompt': False})
            steps = reply['completion_probabilities']
            cases.append({'prompt_tokens': prompt, 'generated_tokens': [s['id'] for s in steps],
                          'logprob_margins': [round(s['top_logprobs'][0]['logprob'] - s['top_logprobs'][1]['logprob'],
                                                    4) for s in steps]})
        return cases
    finally:
        server.terminate()
        server.wait()


def describe(path, matrix_type):
    reader = gguf.GGUFReader(path)
    field = reader.fields['general.file_type']
    quantized = sorted((t for t in reader.tensors if t.tensor_type.name != 'F32'), key=lambda t: t.name)
    digest = hashlib.sha256()
    for t in quantized:
        digest.update(bytes(t.data.tobytes()))
    return {'file_type': int(field.parts[field.data[0]][0]), 'matrix_type': matrix_type,
            'other_types': {t.name: t.tensor_type.name for t in quantized if t.tensor_type.name != matrix_type},
            'tensor_sha256': digest.hexdigest()}


def main(llama_bin, zoo_f32, shared, out):
    prompts = [c['prompt_tokens'] for c in json.load(open(f'{shared}/reference/zoo.json'))['llama3-Q4_K_M.gguf']['cases']]
    result = {'about': {
        'what': 'llama3 of the zoo in Q4_1, Q5_0, Q5_1 and IQ4_NL as llama-quantize writes them, and llama.cpp\'s '
                'greedy tokens for each file (tests/legacy_quant_test.cpp, tests/zoo_test.cpp ZooF32Converted)',
        'made_by': 'tests/zoo/make_legacy_references.py',
        'llama.cpp': 'llama-cpp-python==0.3.36 vendor/llama.cpp, build 0c1e570, CPU',
        'original': 'llama3-f32.gguf of make_zoo.py OUT 100 (shared/models/zoo/README.md), sha256 '
                    'ccbd757fdf4a566f9c5a2ecb3415bb92e2af485f93178b0117905aa6c115c4a2',
        'tensor_sha256': 'sha256 of the bytes of every tensor not in F32, one after another in the order of their '
                         'names',
        'cases': 'as shared/reference/zoo.json: its llama3 prompts, then llama-server -m FILE -ctk f32 -ctv f32 -fa '
                 'off -np 1 -c 512; /completion with the prompt tokens, n_predict 64, temperature 0, top_k 1, '
                 'ignore_eos, n_probs 2, cache_prompt false; generated_tokens the ids, logprob_margins the top-2 '
                 'logprob difference rounded to 4 decimals'}}
    with tempfile.TemporaryDirectory() as folder:
        for matrix_type in TYPES:
            name = f'llama3-{matrix_type}.gguf'
            path = f'{folder}/{name}'
            subprocess.run([f'{llama_bin}/llama-quantize', f'{zoo_f32}/llama3-f32.gguf', path, matrix_type, '2'],
                           env=dict(os.environ, LD_LIBRARY_PATH=llama_bin), check=True, capture_output=True)
            entry = {'quantize': f'llama-quantize llama3-f32.gguf {name} {matrix_type} 2',
                     'convert_type': matrix_type.lower() + '_mix'}
            entry.update(describe(path, matrix_type))
            entry['cases'] = greedy_cases(llama_bin, path, prompts)
            result[name] = entry
    text = json.dumps(result, indent=1)
    # Lists of numbers on one line each.
    text = re.sub(r'\[\s*([-0-9.,\s]+?)\s*\]', lambda m: '[' + ', '.join(v.strip() for v in m.group(1).split(',')) + ']',
                  text)
    with open(out, 'w') as f:
        f.write(text + '\n')


if __name__ == '__main__':
    main(*sys.argv[1:5])
