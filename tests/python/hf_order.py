"""The parameter and state-dict order of a Hugging Face model as the real
`transformers` package registers it (tests/tests/transformer_nets.rs).

    hf_order.py FOLDER   builds the model of FOLDER/config.json (ViTModel or
        BertModel, with its pooler, as `AutoModel` makes it) and prints one
        JSON object: {"state_dict": [...], "parameters": [...]}.
"""
import json
import sys

import transformers


def main(folder):
    config = transformers.AutoConfig.from_pretrained(folder)
    model = transformers.AutoModel.from_config(config)
    print(json.dumps({
        "version": transformers.__version__,
        "state_dict": list(model.state_dict().keys()),
        "parameters": [name for name, _ in model.named_parameters()],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
