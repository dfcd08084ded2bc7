"""Constants of the kernel-cost model, fitted by scripts/kernel_fit.py (do not edit by hand).

Fitted on: A100 40GB PCIe, P100 PCIe, T4, V100 PCIe (../shared/kernels/neusight, all rows).
See daydream/costmodel/fit.py for what each constant is and how it is fitted.
"""

FITTED = {'c_tile': 4.0,
 'eff': {'A100 40GB PCIe': {'bmm': 0.91251,
                            'elementwise': 0.87358,
                            'linear': 0.92459,
                            'ln': 0.70382,
                            'softmax': 0.7304},
         'P100 PCIe': {'bmm': 0.99093,
                       'elementwise': 0.73665,
                       'linear': 0.86785,
                       'ln': 0.59484,
                       'softmax': 0.44771},
         'T4': {'bmm': 0.50836, 'elementwise': 0.73862, 'linear': 0.5265, 'ln': 0.63402, 'softmax': 0.67176},
         'V100 PCIe': {'bmm': 0.94686,
                       'elementwise': 0.90689,
                       'linear': 1.05138,
                       'ln': 0.74714,
                       'softmax': 0.69082}},
 'eta': {'tsmc12': 60.92347, 'tsmc16': 32.28396, 'tsmc7': 72.1181},
 'fitted_on': ['A100 40GB PCIe', 'P100 PCIe', 'T4', 'V100 PCIe'],
 'h_occ': 1.0,
 'spread': {'cross': {'bmm': [0.86086, 1.79978],
                      'elementwise': [0.96269, 1.03874],
                      'linear': [0.81584, 1.39469],
                      'ln': [0.77367, 1.2929],
                      'softmax': [0.72641, 1.37608]},
            'shape': {'bmm': [0.85798, 1.14366], 'linear': [0.88401, 1.0863]}},
 'tile_policy': 'best',
 'tiles': {'ampere': {'bmm': [128, 128, 256], 'linear': [128, 64, 128]},
           'maxwell': {'bmm': [128, 64, 128], 'linear': [32, 128, 256]},
           'volta': {'bmm': [128, 64, 128], 'linear': [128, 128, 256]}}}
